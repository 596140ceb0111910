"""Antigravity (Cloud Code ``v1internal``) native facade: operations, request descriptors built from
a native body plus trusted bindings, response and error decoding, and the lifecycle helpers.

See :mod:`oam_actors.models.codecs.antigravity` for the contract; this module holds the
non-streaming half.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from ._errors import CodecError, ProviderError, error_code_for, invalid_request, malformed
from ._ratelimit import MAX_RETRY_AFTER, Headers
from ._wire import encode_json, parse_object
from .google import GoogleCodec

__all__ = [
    "MAX_BODY_KEYS",
    "MAX_RESPONSE_BYTES",
    "Bindings",
    "NativeRequest",
    "OnboardingStatus",
    "Operation",
    "available_models",
    "build_request",
    "check_identifier",
    "decode_error",
    "decode_response",
    "error_from_document",
    "onboarding_status",
    "operation",
    "parse_bounded",
    "project_id",
]

MAX_BODY_KEYS = 512
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
_MAX_IDENTIFIER_BYTES = 256
_JSON = "application/json"
_MESSAGE = "Antigravity provider request failed"
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")
_PROVIDER_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,127}")
_DIGITS = re.compile(r"[0-9]+")
_IMF_FIXDATE = re.compile(
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT"
)
_METADATA_DEFAULTS = {"ideType": 9, "pluginType": 2, "platform": 0}
# Only for the Google error details it reads (context-overflow hint, RetryInfo delay).
_GOOGLE = GoogleCodec()


class Operation(enum.StrEnum):
    """The five RPCs, in the reference's order; the value is the operation id."""

    LOAD_CODE_ASSIST = "load_code_assist"
    ONBOARD_USER = "onboard_user"
    FETCH_AVAILABLE_MODELS = "fetch_available_models"
    GENERATE_CONTENT = "generate_content"
    STREAM_GENERATE_CONTENT = "stream_generate_content"

    @property
    def rpc(self) -> str:
        """The case-sensitive RPC name after ``v1internal:``."""
        return _RPC[self]

    @property
    def path(self) -> str:
        return f"/v1internal:{self.rpc}"

    @property
    def streaming(self) -> bool:
        return self is Operation.STREAM_GENERATE_CONTENT

    @property
    def generation(self) -> bool:
        return self in (Operation.GENERATE_CONTENT, Operation.STREAM_GENERATE_CONTENT)


_RPC = {
    Operation.LOAD_CODE_ASSIST: "loadCodeAssist",
    Operation.ONBOARD_USER: "onboardUser",
    Operation.FETCH_AVAILABLE_MODELS: "fetchAvailableModels",
    Operation.GENERATE_CONTENT: "generateContent",
    Operation.STREAM_GENERATE_CONTENT: "streamGenerateContent",
}
_BY_NAME = {**{op.value: op for op in Operation}, **{rpc: op for op, rpc in _RPC.items()}}


class Bindings(msgspec.Struct, frozen=True, kw_only=True):
    """Values the host trusts (configuration, never protocol messages). ``None``: not bound."""

    project: str | None = None
    model: str | None = None
    session_id: str | None = None
    request_id: str | None = None
    user_agent: str | None = None
    client_version: str | None = None


class NativeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What to send; carries no credentials (the host adds them)."""

    operation: Operation
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def target(self) -> str:
        """``path`` plus ``?query`` when there is one."""
        return f"{self.path}?{self.query}" if self.query else self.path


class OnboardingStatus(msgspec.Struct, frozen=True, kw_only=True):
    """An onboardUser long-running operation: still pending, or done with its project."""

    done: bool
    project: str | None = None


def operation(name: Any) -> Operation:
    """The operation named by its id or exact RPC name; anything else is ``invalid_request``."""
    if isinstance(name, Operation):
        return name
    if not isinstance(name, str):
        raise invalid_request("Antigravity operation must be a string")
    found = _BY_NAME.get(name)
    if found is None:
        raise invalid_request(f"Unsupported Antigravity operation: {name[:64]!r}")
    return found


def check_identifier(value: Any, label: str) -> str:
    """The header-injection guard: a non-empty string of ≤256 UTF-8 bytes without CR or LF."""
    if not isinstance(value, str):
        raise invalid_request(f"{label} must be a string")
    if not value:
        raise invalid_request(f"{label} must not be empty")
    if len(value.encode("utf-8", "surrogatepass")) > _MAX_IDENTIFIER_BYTES:
        raise invalid_request(f"{label} exceeds {_MAX_IDENTIFIER_BYTES} bytes")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_request(f"{label} must be valid UTF-8") from None
    if "\r" in value or "\n" in value:
        raise invalid_request(f"{label} must not contain CR or LF")
    return value


def build_request(op: Any, body: Any, bindings: Bindings | None = None) -> NativeRequest:
    """The request descriptor for ``op`` from a native ``body`` and trusted ``bindings``.

    The body is never mutated; unknown keys, nested ones included, are kept. Raises
    ``invalid_request`` (nothing is sent) for any rule of the reference's §4-§5.
    """
    op = operation(op)
    bindings = Bindings() if bindings is None else bindings
    if not isinstance(bindings, Bindings):
        raise invalid_request("Antigravity bindings must be Bindings")
    if not isinstance(body, dict):
        raise invalid_request("Antigravity body must be a map")
    if len(body) > MAX_BODY_KEYS:
        raise invalid_request(f"Antigravity body map too large (over {MAX_BODY_KEYS} keys)")
    final = _BUILDERS[op](dict(body), bindings)
    return NativeRequest(
        operation=op,
        method="POST",
        path=op.path,
        query="alt=sse" if op.streaming else "",
        headers=_headers(op, final, bindings),
        body=encode_json(final),
    )


def _load(body: dict[str, Any], bindings: Bindings) -> dict[str, Any]:
    body["metadata"] = _metadata(body, bindings)
    body.setdefault("mode", 1)
    return body


def _onboard(body: dict[str, Any], bindings: Bindings) -> dict[str, Any]:
    if "tierId" not in body:
        raise invalid_request("onboardUser requires tierId")
    check_identifier(body["tierId"], "tierId")
    # The project travels in metadata only; a top-level one would be ambiguous.
    for key in ("project", "cloudaicompanionProject"):
        if key in body:
            raise invalid_request(f"onboardUser takes the project in metadata.duetProject, not {key}")
    body["metadata"] = _metadata(body, bindings)
    return body


def _fetch_models(body: dict[str, Any], bindings: Bindings) -> dict[str, Any]:
    _bind(body, "project", bindings.project, "project")
    return body


def _generate(body: dict[str, Any], bindings: Bindings) -> dict[str, Any]:
    if not isinstance(bindings.project, str):
        raise invalid_request("generation requires a trusted project binding (a string)")
    _bind(body, "project", bindings.project, "project")
    body["model"] = _model(body, bindings.model)
    request = body.get("request")
    if not isinstance(request, dict):
        raise invalid_request("generation request required (request must be a map)")
    request = dict(request)
    _bind(request, "sessionId", bindings.session_id, "session id")
    body["request"] = request
    _bind(body, "requestId", bindings.request_id, "request id")
    body.setdefault("userAgent", "antigravity")
    body.setdefault("requestType", "agent")
    return body


_BUILDERS = {
    Operation.LOAD_CODE_ASSIST: _load,
    Operation.ONBOARD_USER: _onboard,
    Operation.FETCH_AVAILABLE_MODELS: _fetch_models,
    Operation.GENERATE_CONTENT: _generate,
    Operation.STREAM_GENERATE_CONTENT: _generate,
}


def _metadata(body: dict[str, Any], bindings: Bindings) -> dict[str, Any]:
    caller = body.get("metadata", {})
    if not isinstance(caller, dict):
        raise invalid_request("metadata must be a map")
    metadata = {**_METADATA_DEFAULTS, **caller}
    _bind(metadata, "duetProject", bindings.project, "project")
    return metadata


def _bind(target: dict[str, Any], key: str, bound: str | None, label: str) -> None:
    """Set ``key`` from a binding (an equal value is fine, a different one a conflict); without a
    binding a present value is still identifier-checked."""
    if bound is None:
        if key in target:
            check_identifier(target[key], label)
        return
    check_identifier(bound, label)
    if key in target and target[key] != bound:
        raise invalid_request(f"{label} conflicts with trusted binding")
    target[key] = bound


def _model(body: dict[str, Any], bound: str | None) -> str:
    value = bound if bound is not None else body.get("model")
    if not isinstance(value, str) or _MODEL.fullmatch(value) is None:
        raise invalid_request("model must be a safe single segment")
    if "model" in body and body["model"] != value:
        raise invalid_request("model conflicts with trusted binding")
    return value


def _headers(op: Operation, body: dict[str, Any], bindings: Bindings) -> list[tuple[str, str]]:
    headers = [
        ("content-type", _JSON),
        ("accept", "text/event-stream" if op.streaming else _JSON),
        ("x-client-name", "antigravity"),
    ]
    if bindings.user_agent is not None:
        headers.append(("user-agent", check_identifier(bindings.user_agent, "user agent")))
    if bindings.client_version is not None:
        headers.append(("x-client-version", check_identifier(bindings.client_version, "client version")))
    request = body.get("request")
    # Derived from the final body for every operation, so a session id can never bypass the guard.
    if isinstance(request, dict) and "sessionId" in request:
        headers.append(("x-machine-session-id", check_identifier(request["sessionId"], "session id")))
    return headers


def parse_bounded(body: Any, limit: int) -> dict[str, Any]:
    """A JSON object of at most ``limit`` UTF-8 bytes (``malformed`` otherwise)."""
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    if not isinstance(body, bytes | bytearray | memoryview):
        raise invalid_request("Antigravity response must be a JSON string")
    if len(body) > limit:
        raise malformed(f"Antigravity response is not a JSON object (over {limit} bytes)")
    return parse_object(body)


def decode_response(
    op: Any,
    status: int,
    headers: Headers,
    body: bytes,
    *,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The native document of a 2xx answer, unchanged (envelope and unknown fields kept).

    Raises :class:`ProviderError` for a non-2xx status (any body) or a 2xx ``error`` object,
    ``malformed`` for a 2xx body that is not a JSON object within the bound.
    """
    operation(op)
    if isinstance(status, bool) or not isinstance(status, int):
        raise invalid_request("Antigravity response status must be an integer")
    if not 200 <= status < 300:
        raise decode_error(status, headers, body, now=now)
    doc = parse_bounded(body, max_response_bytes)
    if isinstance(doc.get("error"), dict):
        raise error_from_document(doc, status=status, headers=headers, now=now)
    return doc


def decode_error(status: int, headers: Headers, body: Any, *, now: dt.datetime | None = None) -> ProviderError:
    """The sanitized error an HTTP error response means. Never raises; any body is accepted."""
    try:
        doc = parse_bounded(body, MAX_RESPONSE_BYTES)
    except CodecError:
        doc = {}
    return error_from_document(doc, status=status, headers=headers, now=now)


def error_from_document(
    doc: Mapping[str, Any], *, status: int | None = 200, headers: Headers = (), now: dt.datetime | None = None
) -> ProviderError:
    """The sanitized error of a native document: an error status's body, or an ``error`` object
    on a 2xx answer (``status`` 200) or in a stream (``None``, as the other codecs report stream
    errors). The upstream message is never copied."""
    error = doc.get("error")
    error = error if isinstance(error, dict) else {}
    code = _provider_code(error)
    details = _GOOGLE._error_details({"error": error})  # same package: one reading of Google errors
    in_band = status is None or 200 <= status < 300
    retry_after = _retry_after(headers, now)
    return ProviderError(
        _MESSAGE,
        http_status=status,
        provider_code=code,
        error_code=error_code_for(None if in_band else status, code, context_exceeded=details.context_exceeded),
        retry_after=retry_after if retry_after is not None else details.retry_after,
        request_id=_header(headers, "x-request-id"),
    )


def _provider_code(error: Mapping[str, Any]) -> str | None:
    """The first present of status, type, code; picked before the strict check (a bad status
    hides a good code, as in the reference)."""
    for key in ("status", "type", "code"):
        if error.get(key) is not None:
            value = error[key]
            break
    else:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and _PROVIDER_CODE.fullmatch(value):
        return value
    return None


def _retry_after(headers: Headers, now: dt.datetime | None) -> float | None:
    """Seconds from the first ``Retry-After``: whole delta-seconds or an IMF-fixdate only."""
    value = _header(headers, "retry-after")
    if value is None:
        return None
    value = value.strip()
    if _DIGITS.fullmatch(value):
        return min(float(value), MAX_RETRY_AFTER)
    if _IMF_FIXDATE.fullmatch(value):
        instant = email.utils.parsedate_to_datetime(value)
        delta = (instant - (now or dt.datetime.now(dt.UTC))).total_seconds()
        return min(max(delta, 0.0), MAX_RETRY_AFTER)
    return None


def _header(headers: Headers, name: str) -> str | None:
    """The first value of header ``name`` (case-insensitive)."""
    items: Iterable[tuple[Any, Any]] = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if _text(key).lower() == name:
            return _text(value)
    return None


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def project_id(doc: Any) -> str | None:
    """``cloudaicompanionProject``, else ``response.cloudaicompanionProject``: a non-empty string
    or an object with a non-empty string ``id``. Never raises."""
    if not isinstance(doc, dict):
        return None
    found = _project_value(doc.get("cloudaicompanionProject"))
    response = doc.get("response")
    if found is None and isinstance(response, dict):
        found = _project_value(response.get("cloudaicompanionProject"))
    return found


def _project_value(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) and value else None


def available_models(doc: Any) -> dict[str, Any] | None:
    """The fetchAvailableModels catalog: an object keyed by model id, entries unchanged."""
    models = doc.get("models") if isinstance(doc, dict) else None
    return models if isinstance(models, dict) else None


def onboarding_status(doc: Any) -> OnboardingStatus:
    """Where an onboardUser operation stands. Raises :class:`ProviderError` for an ``error``
    object, ``invalid_request`` for a non-map or a completed operation without a project."""
    if not isinstance(doc, dict):
        raise invalid_request("onboarding status must be a map")
    if isinstance(doc.get("error"), dict):
        raise error_from_document(doc)
    if doc.get("done") is not True:
        return OnboardingStatus(done=False)
    project = project_id(doc)
    if project is None:
        raise invalid_request("onboarding completed with no project")
    return OnboardingStatus(done=True, project=project)
