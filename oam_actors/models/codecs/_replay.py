"""Origin binding of opaque provider state (Backplane's replay rules).

Decoding stamps every :class:`~._canonical.ProviderState` with the backend identity that produced
it (:func:`origin_for`). Encoding replays a state only to that same identity
(:func:`check_replay`):

1. origin and destination both name ``profile``, ``endpoint`` and ``model``
   (else ``{"field":"affinity","reason":"missing_origin"}``);
2. the origin's protocol is the target codec's and its kind is the one that codec replays;
3. every destination field equals the origin's wherever the origin has a value
   (else ``cross_origin``);
4. Google additionally requires ``profile``, ``endpoint``, ``account``, ``model``,
   ``credential_scope`` and ``credential_version`` on both sides (``missing_<field>``) — also when
   decoding a signed part (:func:`require_google_affinity`).

The destination's ``model`` is always the request's model. Failures are
:func:`~._errors.unsupported` (encode) or :func:`~._errors.lossy` (decode).
"""

from __future__ import annotations

import msgspec

from ._canonical import Affinity, ProviderState
from ._errors import CodecError, lossy, unsupported

__all__ = ["GOOGLE_REQUIRED", "check_replay", "origin_for", "require_google_affinity"]

_REQUIRED = ("profile", "endpoint", "model")
_COMPARED = ("profile", "endpoint", "account", "workspace", "model", "credential_scope", "credential_version")
GOOGLE_REQUIRED = ("profile", "endpoint", "account", "model", "credential_scope", "credential_version")


def origin_for(affinity: Affinity | None, protocol: str, model: str | None) -> Affinity:
    """The origin stamped on decoded state: the codec's identity, its protocol, the request model."""
    base = affinity or Affinity(profile=protocol)
    return msgspec.structs.replace(base, protocol=protocol, model=model or base.model)


def require_google_affinity(affinity: Affinity | None, *, decoding: bool) -> None:
    """Signed Gemini parts are bound to a complete credential identity."""
    for name in GOOGLE_REQUIRED:
        if affinity is None or not getattr(affinity, name):
            compatibility = {"field": "affinity", "reason": f"missing_{name}"}
            message = "Google thought signatures require complete affinity"
            raise lossy(message, compatibility) if decoding else unsupported(message, compatibility)


def check_replay(
    state: ProviderState,
    *,
    protocol: str,
    kind: str,
    destination: Affinity | None,
    model: str,
) -> None:
    """Raise unless ``state`` may be replayed to ``destination`` (with ``model``) over ``protocol``."""
    if state.kind != kind:
        raise unsupported(f"Unsupported {protocol} provider state", {"field": "provider_state", "reason": "kind"})
    target = msgspec.structs.replace(destination, model=model) if destination else None
    if protocol == "google":
        require_google_affinity(state.origin, decoding=False)
        require_google_affinity(target, decoding=False)
    if target is None or not _has_all(state.origin, _REQUIRED) or not _has_all(target, _REQUIRED):
        raise _affinity_error("missing_origin")
    if state.origin.protocol != protocol:
        raise _affinity_error("cross_origin")
    for name in _COMPARED:
        expected = getattr(state.origin, name)
        if expected is not None and getattr(target, name) != expected:
            raise _affinity_error("cross_origin")


def _has_all(affinity: Affinity, names: tuple[str, ...]) -> bool:
    return all(getattr(affinity, name) for name in names)


def _affinity_error(reason: str) -> CodecError:
    return unsupported("Provider state cannot be replayed to this backend", {"field": "affinity", "reason": reason})
