"""Antigravity (Cloud Code ``v1internal``) native protocol facade, its Google GenerateContent
compatibility boundary, and its usage observer.

Pure, like the other codecs: no sockets, no credentials, no fallback project, no endpoint choice;
the host adds credentials to :attr:`NativeRequest.headers` and POSTs ``base_url + target``.
Reference: ``shared/reference/antigravity.md`` (Backplane.AiProtocol.Antigravity).

**Native facade.** :data:`OPERATIONS` are the five RPCs in order (:func:`operation` looks one up
by id or exact RPC name; ``countTokens`` is not one of them). :func:`build_request` turns a native
body plus trusted :class:`Bindings` into a :class:`NativeRequest`: loadCodeAssist and onboardUser
merge ``metadata`` over ``{ideType 9, pluginType 2, platform 0}`` (the caller wins) with the
project in ``metadata.duetProject``; fetchAvailableModels puts it at the top level; generation
requires a bound project and a safe single-segment model (bound or in the body) and binds
``request.sessionId`` and ``requestId``. A bound value fills an absent field, accepts an equal one
and rejects a different one ("… conflicts with trusted binding"); identifiers (project, session and
request ids, ``tierId``, user agent, client version) must be non-empty strings of at most 256 UTF-8
bytes without CR or LF, the header-injection guard. :func:`decode_response` returns a 2xx document
unchanged and raises a sanitized :class:`~._errors.ProviderError` otherwise (status kept;
``provider_code`` the first of ``error.status``/``type``/``code``, kept only if it looks like
``RESOURCE_EXHAUSTED`` or is an integer; ``retry_after`` from whole-second or IMF-fixdate
``Retry-After``, else a Google ``RetryInfo``). :func:`project_id`, :func:`available_models` and
:func:`onboarding_status` read the lifecycle documents.

**Native stream.** :class:`NativeStream` frames the SSE body (bounded: 8 MiB, 10,000 events, the
shared framer's 256 KiB frames and 512 KiB buffer) into documents exactly as sent; an ``error``
document is returned too and makes ``protocol_terminal`` ``failed``. There is no ``[DONE]``:
``finish()`` at eof is the end. Splitting the body anywhere gives the same documents.

**Google boundary.** :func:`encode_google_request` wraps an allow-listed GenerateContent body into
``{"request": …}`` (caller ``model``/``project`` are refused: the host binds them);
:func:`map_google_response` and :class:`GoogleStream` unwrap ``response`` (error documents pass
whole) and require a Gemini completion before eof. :func:`encode_count_request` and
:func:`map_count_response` convert text-only countTokens (anything else is ``incompatible``; an
empty ``{}`` answer counts 0).

**Canonical codec.** :class:`AntigravityCodec` is a :class:`~._base.ProviderCodec` (the proxy
model's seam): the Google codec's GenerateContent body goes through :func:`encode_google_request`
and :func:`build_request` with the codec's configured project, the request's model, the codec's
session id and a fresh ``agent-<uuid>`` request id; answers are unwrapped and decoded by the Google
codec, and errors are the sanitized ones above.

**Observer.** :class:`UsageObserver` (and :func:`observe_response`) never raises and never touches
the bytes it is shown; it reports :class:`UsageFacts` (token usage, finish reasons, candidates,
error code and type but never the message) within byte, event and parse-time budgets.

Errors: caller mistakes are ``invalid_request`` (kind and code; stage ``validation``); content a
countTokens conversion cannot carry is ``incompatible`` (stage ``translation``, code
``invalid_request``); broken provider bytes are ``malformed`` (kind ``invalid_request``, stage
``wire``, code ``generation_failed``); a stream that ends before its end is the shared
incomplete-stream error (code ``cancelled`` after a cancel, else ``generation_failed``).

Deliberate differences from Backplane: errors are raised, not returned; ``retry_after`` is seconds
(clamped to 10 min) and ``now`` an aware ``datetime``; the status→kind table and the protocol codes
are the shared ones of :mod:`._errors` (so 409 is ``invalid_request`` and a 2xx error object's code
follows its provider code); onboardUser refuses a top-level ``project``/``cloudaicompanionProject``
instead of sending it; the observer reads documents directly rather than re-framing them for an
inner observer.
"""

from __future__ import annotations

from ._antigravity_codec import AntigravityCodec, AntigravityStreamDecoder
from ._antigravity_google import (
    GOOGLE_REQUEST_KEYS,
    GoogleStream,
    encode_count_request,
    encode_google_request,
    map_count_response,
    map_google_response,
)
from ._antigravity_native import (
    Bindings,
    NativeRequest,
    OnboardingStatus,
    Operation,
    available_models,
    build_request,
    check_identifier,
    decode_error,
    decode_response,
    error_from_document,
    onboarding_status,
    operation,
    project_id,
)
from ._antigravity_observer import FINISH_REASONS, UsageFacts, UsageObserver, observe_response
from ._antigravity_stream import EndReason, NativeStream, StreamStatus

__all__ = [
    "FINISH_REASONS",
    "GOOGLE_REQUEST_KEYS",
    "OPERATIONS",
    "AntigravityCodec",
    "AntigravityStreamDecoder",
    "Bindings",
    "EndReason",
    "GoogleStream",
    "NativeRequest",
    "NativeStream",
    "OnboardingStatus",
    "Operation",
    "StreamStatus",
    "UsageFacts",
    "UsageObserver",
    "available_models",
    "build_request",
    "check_identifier",
    "decode_error",
    "decode_response",
    "encode_count_request",
    "encode_google_request",
    "error_from_document",
    "map_count_response",
    "map_google_response",
    "observe_response",
    "onboarding_status",
    "operation",
    "project_id",
]

OPERATIONS: tuple[Operation, ...] = tuple(Operation)
"""The five RPCs in the reference's order; only the last streams."""
