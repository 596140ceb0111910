"""The Google GenerateContent compatibility boundary over an Antigravity upstream, and the text-only
countTokens conversion.

See :mod:`oam_actors.models.codecs.antigravity` for the contract.
"""

from __future__ import annotations

from typing import Any

from ._antigravity_native import MAX_BODY_KEYS, parse_bounded
from ._antigravity_stream import EndReason, NativeStream, StreamStatus
from ._errors import CodecError, invalid_request, malformed, unsupported
from ._wire import encode_json

__all__ = [
    "GOOGLE_REQUEST_KEYS",
    "MAX_GOOGLE_BYTES",
    "GoogleStream",
    "encode_count_request",
    "encode_google_request",
    "map_count_response",
    "map_google_response",
]

MAX_GOOGLE_BYTES = 2 * 1024 * 1024
GOOGLE_REQUEST_KEYS = frozenset(
    {
        "cachedContent",
        "contents",
        "generationConfig",
        "labels",
        "safetySettings",
        "sessionId",
        "systemInstruction",
        "toolConfig",
        "tools",
    }
)
_PROVIDER_OWNED = frozenset({"project", "model", "authorization", "apiKey", "x-api-key", "x-goog-api-key"})
_COUNT_SHAPES = frozenset({"contents", "generateContentRequest"})
_TEXT_ONLY = "count_tokens_text_only"
_ZERO_TOKENS = b'{"totalTokens":0}'


def encode_google_request(body: Any) -> dict[str, Any]:
    """``{"request": body}`` for a GenerateContent body (unchanged). Provider-owned keys such as
    ``model`` and ``project`` and any unknown key are ``invalid_request``."""
    if not isinstance(body, dict):
        raise invalid_request("GenerateContent body must be a map")
    _check_size(body)
    extra = sorted(key for key in body if key not in GOOGLE_REQUEST_KEYS)
    if extra:
        raise invalid_request(f"GenerateContent field not accepted here: {str(extra[0])[:64]}")
    if not isinstance(body.get("contents"), list):
        raise invalid_request("contents must be a list")
    return {"request": body}


def map_google_response(status: int, body: Any) -> bytes:
    """A native answer as the Google GenerateContent bytes: non-2xx byte for byte, else the
    unwrapped ``response`` (or the whole ``error`` document), re-encoded."""
    data = _bytes(body)
    if not 200 <= status < 300:
        return data
    return encode_json(_unwrap(parse_bounded(data, MAX_GOOGLE_BYTES)))


def _bytes(body: Any) -> bytes:
    if not isinstance(body, bytes | bytearray | memoryview):
        raise invalid_request("Antigravity response must be bytes")
    return bytes(body)


def _unwrap(doc: dict[str, Any]) -> dict[str, Any]:
    response = doc.get("response")
    if isinstance(response, dict):
        return response
    if isinstance(doc.get("error"), dict):
        return doc
    raise malformed("Antigravity envelope missing response")


class GoogleStream:
    """Translates a native SSE body into Google SSE frames (``data: <json>`` + blank line),
    incrementally. Gemini completion is required: an error document, a blocked prompt or a
    candidate ``finishReason`` must arrive before eof. Frames after it (trailing usage) still pass.
    """

    def __init__(self, **limits: int) -> None:
        self._native = NativeStream(**limits)
        self.terminal_seen = False

    @property
    def terminal(self) -> StreamStatus | None:
        return self._native.terminal

    def feed(self, chunk: bytes) -> list[bytes]:
        return self._frames(self._native.feed(chunk))

    def finish(self, reason: EndReason | str = EndReason.EOF) -> list[bytes]:
        """The last frames at a clean eof; every other ending raises (nothing is invented)."""
        frames = self._frames(self._native.finish(reason))
        if not self.terminal_seen:
            self._native.abort()
            raise malformed("Antigravity stream ended before Gemini completion")
        return frames

    def _frames(self, documents: list[dict[str, Any]]) -> list[bytes]:
        try:
            return [self._frame(doc) for doc in documents]
        except CodecError:
            self._native.abort()
            raise

    def _frame(self, doc: dict[str, Any]) -> bytes:
        inner = _unwrap(doc)
        if _is_terminal(inner):
            self.terminal_seen = True
        return b"data: " + encode_json(inner) + b"\n\n"


def _is_terminal(doc: dict[str, Any]) -> bool:
    if isinstance(doc.get("error"), dict):
        return True
    feedback = doc.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        return True
    candidates = doc.get("candidates")
    return isinstance(candidates, list) and any(
        isinstance(c, dict) and isinstance(c.get("finishReason"), str) and c["finishReason"] for c in candidates
    )


def encode_count_request(body: Any, requested_model: Any, resolved_model: Any) -> dict[str, Any]:
    """The native countTokens body for a text-only request: ``{"request": {"model": resolved,
    "contents": …}}``. Broken input is ``invalid_request``; anything beyond text (tools, system
    instructions, images, calls, thoughts) is ``incompatible``, since the upstream count is
    unreliable for it. Checks run in the reference's order; the first failure wins."""
    if not isinstance(body, dict):
        raise invalid_request("countTokens body must be a map")
    if not isinstance(requested_model, str) or not isinstance(resolved_model, str):
        raise invalid_request("countTokens model must be a string")
    _check_size(body)
    if ("contents" in body) == ("generateContentRequest" in body):
        raise invalid_request("countTokens takes exactly one of contents or generateContentRequest")
    _check_extra_keys(body, _COUNT_SHAPES)
    if "generateContentRequest" in body:
        contents = _nested_contents(body["generateContentRequest"], (requested_model, resolved_model))
    else:
        contents = body["contents"]
    _check_contents(contents)
    return {"request": {"model": resolved_model, "contents": contents}}


def _check_size(body: dict[str, Any]) -> None:
    if len(body) > MAX_BODY_KEYS:
        raise invalid_request(f"body map too large (over {MAX_BODY_KEYS} keys)")


def _check_extra_keys(body: dict[str, Any], allowed: frozenset[str]) -> None:
    """Provider-owned extras are broken input; any other extra is beyond what a count can carry."""
    extra = sorted(str(key) for key in body if key not in allowed)
    owned = [key for key in extra if key in _PROVIDER_OWNED]
    if owned:
        raise invalid_request(f"countTokens field is provider-owned: {owned[0]}")
    if extra:
        raise _beyond_text(extra[0])


def _beyond_text(field: str) -> CodecError:
    return unsupported(f"countTokens does not accept {field[:64]}", {"field": field[:64], "reason": _TEXT_ONLY})


def _nested_contents(inner: Any, models: tuple[str, str]) -> Any:
    if not isinstance(inner, dict):
        raise invalid_request("generateContentRequest must be a map")
    _check_extra_keys(inner, frozenset({"model", "contents"}))
    if "model" in inner:
        accepted = {name for model in models for name in (model, f"models/{model}")}
        if not isinstance(inner["model"], str) or inner["model"] not in accepted:
            raise invalid_request("generateContentRequest.model does not name the requested model")
    return inner.get("contents")


def _check_contents(contents: Any) -> None:
    if not isinstance(contents, list):
        raise invalid_request("contents must be a list")
    for content in contents:
        _check_content(content)


def _check_content(content: Any) -> None:
    if not isinstance(content, dict):
        raise invalid_request("contents[] must be a map")
    extra = sorted(str(key) for key in content if key not in ("role", "parts"))
    if extra:
        raise _beyond_text(extra[0])
    role = content.get("role")
    if "role" in content and not (isinstance(role, str) and role and _utf8(role)):
        raise invalid_request("contents[].role must be a non-empty string")
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise invalid_request("contents[].parts must be a list")
    for part in parts:
        _check_part(part)


def _check_part(part: Any) -> None:
    if not isinstance(part, dict):
        raise invalid_request("parts[] must be a map")
    if "text" in part and not isinstance(part["text"], str):
        raise invalid_request("parts[].text must be a string")
    if "text" not in part or len(part) > 1:
        kinds = ",".join(sorted(str(key) for key in part if key != "text"))[:64]
        raise unsupported("countTokens counts text parts only", {"field": "parts[]", "reason": kinds or _TEXT_ONLY})


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def map_count_response(status: int, body: Any) -> bytes:
    """The Google countTokens answer: non-2xx passthrough; ``{}`` is ``{"totalTokens":0}`` (the
    upstream omits the protobuf zero); a non-negative integer ``totalTokens`` keeps the original
    bytes; anything else is ``malformed``."""
    data = _bytes(body)
    if not 200 <= status < 300:
        return data
    doc = parse_bounded(data, MAX_GOOGLE_BYTES)
    if not doc:
        return _ZERO_TOKENS
    total = doc.get("totalTokens")
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise malformed("countTokens response needs a non-negative integer totalTokens")
    return data
