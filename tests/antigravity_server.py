"""A loopback Cloud Code ``v1internal`` server for the Antigravity tests.

:class:`AntigravityServer` is a :class:`~provider_servers.ProviderServer` (same HTTP/1.1 loop,
chunked bodies written piece by piece, recorded requests) that speaks the five RPCs:
``/v1internal:loadCodeAssist`` answers the project and tiers, ``onboardUser`` is a long-running
operation (pending ``pending_polls`` times, then done), ``fetchAvailableModels`` the catalog keyed
by model id; ``generateContent`` and ``streamGenerateContent?alt=sse`` take the next queued
:class:`~provider_servers.Reply` (build one with :func:`native_text` / :func:`native_stream`).
Every RPC wants ``authorization: Bearer <token>`` (else 401) and a generation wants the envelope
(``project``, ``model``, ``request``) for the server's project (else 403); an unknown RPC is 404,
all as Google error objects.
"""

from __future__ import annotations

import json
from typing import Any

from provider_servers import ProviderServer, Recorded, Reply, split

TOKEN = "ya29.test-access-token"
PROJECT = "example-project"
LIFECYCLE = ("loadCodeAssist", "onboardUser", "fetchAvailableModels")
GENERATION = ("generateContent", "streamGenerateContent")
MODELS = {
    "gemini-x": {"displayName": "Gemini X", "quotaInfo": {"remainingFraction": 0.75}},
    "gemini-x-lite": {"displayName": "Gemini X Lite", "quotaInfo": {"remainingFraction": 1}},
}


class AntigravityServer(ProviderServer):
    def __init__(self, *, token: str = TOKEN, project: str = PROJECT, pending_polls: int = 1) -> None:
        super().__init__()
        self.token = token
        self.project = project
        self.pending_polls = pending_polls

    def next_reply(self, recorded: Recorded) -> Reply:
        path, _, query = recorded.path.partition("?")
        rpc = path.removeprefix("/v1internal:") if path.startswith("/v1internal:") else ""
        if rpc not in LIFECYCLE + GENERATION or (query and (rpc, query) != ("streamGenerateContent", "alt=sse")):
            return self._refuse(recorded, 404, "NOT_FOUND")
        if recorded.headers.get("authorization") != f"Bearer {self.token}":
            return self._refuse(recorded, 401, "UNAUTHENTICATED")
        if rpc in GENERATION:
            body = recorded.body
            envelope_ok = body.get("model") and isinstance(body.get("request"), dict)
            if body.get("project") != self.project or not envelope_ok:
                return self._refuse(recorded, 403, "PERMISSION_DENIED")
            return super().next_reply(recorded)
        self.requests.append(recorded)
        return json_reply(self._lifecycle(rpc))

    def _lifecycle(self, rpc: str) -> dict[str, Any]:
        if rpc == "loadCodeAssist":
            return {
                "allowedTiers": [{"id": "standard-tier", "isDefault": True}],
                "cloudaicompanionProject": self.project,
            }
        if rpc == "onboardUser":
            if self.pending_polls > 0:
                self.pending_polls -= 1
                return {"name": "operations/onboard-1", "done": False}
            return {
                "name": "operations/onboard-1",
                "done": True,
                "response": {"cloudaicompanionProject": {"id": self.project, "name": "Example"}},
            }
        return {"models": MODELS, "defaultAgentModelId": "gemini-x"}

    def _refuse(self, recorded: Recorded, status: int, code: str) -> Reply:
        self.requests.append(recorded)
        return json_reply({"error": {"code": status, "status": code, "message": f"private detail for {code}"}}, status)


def json_reply(document: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"content-type": "application/json", **(headers or {})}, [json.dumps(document).encode()])


def frame(document: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(document, separators=(',', ':'))}\n\n".encode()


def native_stream(*documents: dict[str, Any], size: int = 7) -> Reply:
    """An SSE reply of these native envelopes, cut every ``size`` bytes; no ``[DONE]``."""
    return Reply(200, {"content-type": "text/event-stream"}, split(b"".join(frame(d) for d in documents), size))


def native_text(*pieces: str, size: int = 7) -> Reply:
    """A streamed answer: one envelope per text piece, the last with ``STOP`` and usage."""
    documents = []
    for i, piece in enumerate(pieces):
        candidate: dict[str, Any] = {"index": 0, "content": {"role": "model", "parts": [{"text": piece}]}}
        response: dict[str, Any] = {"candidates": [candidate], "responseId": "resp-1", "modelVersion": "gemini-x"}
        if i == len(pieces) - 1:
            candidate["finishReason"] = "STOP"
            response["usageMetadata"] = {"promptTokenCount": 42, "candidatesTokenCount": 7, "totalTokenCount": 49}
        documents.append({"response": response, "traceId": f"trace-{i}"})
    return native_stream(*documents, size=size)
