"""The passive Antigravity usage observer: usage and completion facts from forwarded bytes.

See :mod:`oam_actors.models.codecs.antigravity` for the contract.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from ._antigravity_stream import MAX_EVENTS, MAX_TOTAL_BYTES, EndReason, StreamStatus, positive_or
from ._sse import MAX_BUFFER_BYTES, MAX_FRAME_BYTES, SseFrame, SseParser

__all__ = ["FINISH_REASONS", "UsageFacts", "UsageObserver", "observe_response"]

SOURCE = "google_antigravity"
PARSE_BUDGET_S = 0.25
MAX_DIAGNOSTICS = 32
MAX_CANDIDATES = 64
MAX_DETAILS = 32
OBSERVER_ERROR = "antigravity_observer_error"

_COUNTERS = {
    "promptTokenCount": "input_tokens",
    "candidatesTokenCount": "output_tokens",
    "cachedContentTokenCount": "cached_tokens",
    "thoughtsTokenCount": "reasoning_tokens",
    "totalTokenCount": "native_total",
    "toolUsePromptTokenCount": None,
}
_DETAILS = ("promptTokensDetails", "cacheTokensDetails", "candidatesTokensDetails", "toolUsePromptTokensDetails")
FINISH_REASONS = frozenset(
    {
        "STOP",
        "MAX_TOKENS",
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "OTHER",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "MALFORMED_FUNCTION_CALL",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_OTHER",
        "NO_IMAGE",
    }
)
"""Gemini finish reasons that end a response legitimately (only ``STOP`` completes it)."""


class UsageFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the observer learned. Never holds message text or opaque values."""

    source: str = SOURCE
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    native_total: int | None = None
    native_usage: dict[str, Any] = {}
    usage_status: Literal["complete", "partial", "unknown"] = "unknown"
    observation: Literal["complete", "incomplete"] = "incomplete"
    partial: bool = False
    protocol_status: StreamStatus | None = None
    transport_status: StreamStatus | None = None
    finish_reason: str | None = None
    finish_reasons: dict[int, str] = {}
    candidate_count: int = 0
    candidate_ambiguous: bool = False
    provider_request_id: str | None = None
    blocked: bool = False
    block_reason: str | None = None
    error_code: str | None = None
    error_type: str | None = None
    diagnostics: tuple[str, ...] = ()


class _Document:
    """The generic GenerateContent facts, accumulated document by document."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] = {}
        self.reasons: dict[int, str] = {}
        self.indexes: set[int] = set()
        self.request_id: str | None = None
        self.block_reason: str | None = None
        self.error_code: str | None = None
        self.error_type: str | None = None
        self.failed = False
        self.invalid = False  # something was unreadable: the observation is incomplete
        self.diagnostics: list[str] = []

    def diagnose(self, text: str) -> None:
        self.invalid = True
        if text not in self.diagnostics and len(self.diagnostics) < MAX_DIAGNOSTICS:
            self.diagnostics.append(text)

    def observe(self, doc: dict[str, Any]) -> None:
        if isinstance(doc.get("error"), dict):
            self._error(doc["error"])
        if doc.get("usageMetadata") is not None:
            self._usage(doc["usageMetadata"])
        if isinstance(doc.get("candidates"), list):
            self._candidates(doc["candidates"])
        if isinstance(doc.get("responseId"), str):
            self.request_id = doc["responseId"][:256]
        feedback = doc.get("promptFeedback")
        if isinstance(feedback, dict) and isinstance(feedback.get("blockReason"), str) and feedback["blockReason"]:
            self.block_reason = feedback["blockReason"][:128]

    def _error(self, error: dict[str, Any]) -> None:
        self.failed = True
        code = error.get("code")
        if isinstance(code, int | str) and not isinstance(code, bool):
            self.error_code = str(code)[:128]
        kind = error.get("status") if error.get("status") is not None else error.get("type")
        if isinstance(kind, str):
            self.error_type = kind.strip()[:128]

    def _usage(self, value: Any) -> None:
        """A snapshot replaces the previous one wholesale (streams report running totals)."""
        if not isinstance(value, dict):
            self.diagnose("invalid_usage_metadata")
            return
        usage: dict[str, Any] = {}
        for key in _COUNTERS:
            count = value.get(key)
            if count is None:
                continue
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                self.diagnose(f"invalid_usage_counter:{key}")
            else:
                usage[key] = count
        for key in _DETAILS:
            if isinstance(value.get(key), list):
                usage[key] = _details(value[key])
        self.usage = usage

    def _candidates(self, candidates: list[Any]) -> None:
        if len(candidates) > MAX_CANDIDATES:
            self.diagnose("candidate_limit")
        for position, candidate in enumerate(candidates[:MAX_CANDIDATES]):
            if not isinstance(candidate, dict):
                self.diagnose("invalid_candidate")
                continue
            index = candidate.get("index")
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                index = position
            self.indexes.add(index)
            reason = candidate.get("finishReason")
            if isinstance(reason, str) and reason:
                self.reasons[index] = reason[:128]


def _details(entries: list[Any]) -> list[dict[str, Any]]:
    kept = []
    for entry in entries[:MAX_DETAILS]:
        if isinstance(entry, dict):
            modality = entry.get("modality")
            count = entry.get("tokenCount")
            kept.append(
                {
                    "modality": modality[:64] if isinstance(modality, str) else None,
                    "tokenCount": count if isinstance(count, int) and not isinstance(count, bool) else None,
                }
            )
    return kept


class UsageObserver:
    """Watches one forwarded native body (SSE, or a whole JSON body via :func:`observe_response`).

    Passive: :meth:`feed` and :meth:`finish` never raise and never touch the bytes. Going over the
    byte or event budget, a framing error or a non-bytes chunk marks the observer malformed and
    stops observation; :meth:`facts` then reports an incomplete, partial observation. A parse-time
    budget (``clock`` is injectable) bounds the work spent on documents.
    """

    def __init__(
        self,
        *,
        max_total_bytes: int = MAX_TOTAL_BYTES,
        max_events: int = MAX_EVENTS,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_buffer_bytes: int = MAX_BUFFER_BYTES,
        parse_budget_s: float = PARSE_BUDGET_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._max_total = positive_or(max_total_bytes, MAX_TOTAL_BYTES)
        self._max_events = positive_or(max_events, MAX_EVENTS)
        self._sse = SseParser(
            max_frame_bytes=positive_or(max_frame_bytes, MAX_FRAME_BYTES),
            max_buffer_bytes=positive_or(max_buffer_bytes, MAX_BUFFER_BYTES),
        )
        self._budget = parse_budget_s
        self._clock = clock
        self._spent = 0.0
        self._bytes = 0
        self._events = 0
        self._doc = _Document()
        self._malformed = False
        self._budget_spent = False
        self._protocol: StreamStatus | None = None
        self._transport: StreamStatus | None = None

    def feed(self, chunk: bytes) -> None:
        """Observe the next forwarded chunk."""
        if not self._malformed and self._transport is None:
            self._guarded(self._feed, chunk)

    def finish(self, reason: EndReason | str = EndReason.EOF) -> None:
        """Record how the transport ended; idempotent once recorded."""
        if self._transport is not None:
            return
        if reason == EndReason.EOF:
            self._transport = StreamStatus.EOF
            if not self._malformed:
                self._guarded(self._flush)
            self._protocol = self._protocol_at_eof()
        elif reason == EndReason.CANCELLED:
            self._transport = StreamStatus.CANCELLED
            self._protocol = StreamStatus.FAILED if self._doc.failed else StreamStatus.CANCELLED
        else:
            self._transport = StreamStatus.FAILED
            self._protocol = StreamStatus.FAILED if self._doc.failed else StreamStatus.INCOMPLETE

    def facts(self) -> UsageFacts:
        """The facts so far (a snapshot; observation goes on)."""
        doc = self._doc
        protocol = StreamStatus.FAILED if doc.failed else self._protocol
        transport = self._transport
        diagnostics = list(doc.diagnostics)
        partial = self._budget_spent or (protocol is StreamStatus.INCOMPLETE and self._ended_short())
        if self._malformed:
            if protocol not in (StreamStatus.FAILED, StreamStatus.CANCELLED):
                protocol = StreamStatus.INCOMPLETE
            transport = transport or StreamStatus.FAILED
            partial = True
            diagnostics.append(OBSERVER_ERROR)
        complete = (
            protocol is StreamStatus.COMPLETED
            and transport is StreamStatus.EOF
            and not (doc.invalid or self._malformed or len(doc.indexes) > 1)
        )
        return UsageFacts(
            **_usage_fields(doc.usage),
            observation="complete" if complete else "incomplete",
            partial=partial,
            protocol_status=protocol,
            transport_status=transport,
            finish_reason=doc.reasons[min(doc.reasons)] if doc.reasons else None,
            finish_reasons=dict(sorted(doc.reasons.items())),
            candidate_count=len(doc.indexes),
            candidate_ambiguous=len(doc.indexes) > 1,
            provider_request_id=doc.request_id,
            blocked=doc.block_reason is not None,
            block_reason=doc.block_reason,
            error_code=doc.error_code,
            error_type=doc.error_type,
            diagnostics=tuple(diagnostics[:MAX_DIAGNOSTICS]),
        )

    def observe_body(self, status: int, body: bytes) -> None:
        """Observe a whole non-streaming answer and finish at eof; an error status is a
        ``failed`` protocol whatever the body says."""
        if self._transport is not None:
            return
        if not 200 <= status < 300:
            self._doc.failed = True
        self._guarded(self._body, body)
        self.finish(EndReason.EOF)

    def _guarded(self, step: Callable[..., None], *args: Any) -> None:
        try:
            step(*args)
        except Exception:  # noqa: BLE001 - passive by contract: a failure only ends observation
            self._malformed = True

    def _body(self, body: bytes) -> None:
        if not isinstance(body, bytes | bytearray | memoryview):
            raise TypeError("body must be bytes")
        if len(body) > self._max_total:
            raise OverflowError("byte budget")
        self._document(bytes(body))

    def _feed(self, chunk: bytes) -> None:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError("chunk must be bytes")
        self._bytes += len(chunk)
        if self._bytes > self._max_total:
            raise OverflowError("byte budget")
        self._frames(self._sse.feed(chunk))

    def _frames(self, frames: list[SseFrame]) -> None:
        self._events += len(frames)
        if self._events > self._max_events:
            raise OverflowError("event budget")
        for frame in frames:
            self._document(frame.data)

    def _flush(self) -> None:
        """At eof, the last frame without a trailing blank line."""
        self._frames(self._sse.finish())

    def _document(self, data: bytes) -> None:
        if self._budget_spent:
            return
        started = self._clock()
        try:
            doc = msgspec.json.decode(data)
        except msgspec.DecodeError:
            doc = None
        if isinstance(doc, dict):
            # Unwrap the envelope: the inner response is observed, the siblings never are.
            inner = doc["response"] if isinstance(doc.get("response"), dict) else doc
            self._doc.observe(inner)
        else:
            self._doc.diagnose("invalid_event")  # [DONE], non-JSON or a non-object
        self._spent += self._clock() - started
        if self._spent > self._budget:
            self._budget_spent = True
            self._doc.diagnose("parse_budget_exhausted")

    def _protocol_at_eof(self) -> StreamStatus:
        if self._doc.failed:
            return StreamStatus.FAILED
        reasons = set(self._doc.reasons.values())
        if self._budget_spent or self._doc.block_reason is not None or not reasons:
            return StreamStatus.INCOMPLETE
        return StreamStatus.COMPLETED if reasons == {"STOP"} else StreamStatus.INCOMPLETE

    def _ended_short(self) -> bool:
        """The response ended legitimately but not fully (``MAX_TOKENS`` and the like)."""
        reasons = set(self._doc.reasons.values())
        return bool(reasons) and reasons <= FINISH_REASONS and reasons != {"STOP"}


def _usage_fields(usage: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {name: usage.get(key) for key, name in _COUNTERS.items() if name}
    known = [v for v in fields.values() if v is not None]
    if fields["input_tokens"] is not None and fields["output_tokens"] is not None:
        status = "complete"
    else:
        status = "partial" if known else "unknown"
    return {**fields, "native_usage": dict(usage), "usage_status": status}


def observe_response(status: int, body: bytes, **options: Any) -> UsageFacts:
    """The facts of a whole non-streaming answer (``options``: :class:`UsageObserver`'s)."""
    observer = UsageObserver(**options)
    observer.observe_body(status, body)
    return observer.facts()
