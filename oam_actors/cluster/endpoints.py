"""Endpoints across the Ray boundary: objects that stay in the driver while actors holding them
live in shards (a connection's outlet), as their layer declares them (``runtime``'s
``register_endpoint``).

When an actor or message is pickled, an endpoint travels as an :data:`EndpointRef`: a small
integer the driver gave it, and its kind. The shard builds one stand-in per endpoint
(``kind.stand_in``) whose calls become ``Out`` items of the shard's ordered output stream; the
driver hands each to the endpoint's relay (``kind.relay``), in order. Ids a stand-in must
invent come from :func:`provisional_ids`, unique across shards and restarts.

A checkpoint holding a stand-in (a world's subscriber) keeps it as its :data:`EndpointRef`
(:class:`StandIns` is the shard's ``runtime.EndpointReferences``): after a restart the new shard
process makes a stand-in for the same endpoint, and the driver, which kept its endpoint numbers
and relays, delivers its calls as before.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable
from typing import Any

from ..runtime import EndpointKind, Relay, endpoint_kind
from .wire import Out

__all__ = ["EndpointRef", "Endpoints", "StandIns", "provisional_ids"]

EndpointRef = tuple[int, EndpointKind]
"""How an endpoint is pickled (``persistent_id``): its number in the driver, and its kind."""


class Endpoints:
    """The driver's endpoints, by number, each with its relay."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._by_object: dict[int, EndpointRef] = {}  # id(endpoint) -> its reference
        self._relays: dict[int, Relay] = {}

    def reference(self, obj: Any) -> EndpointRef | None:
        """``obj``'s reference if it is an endpoint (numbered on first sight), else ``None``."""
        kind = endpoint_kind(obj)
        if kind is None:
            return None
        ref = self._by_object.get(id(obj))
        if ref is None:
            ref = self._by_object[id(obj)] = (next(self._ids), kind)
            self._relays[ref[0]] = kind.relay(obj)
            weakref.finalize(obj, self._forget, id(obj), ref[0])
        return ref

    def deliver(self, out: Out) -> None:
        relay = self._relays.get(out.endpoint)
        if relay is not None:
            relay.deliver(out.loads())

    def _forget(self, object_id: int, endpoint: int) -> None:
        self._by_object.pop(object_id, None)
        self._relays.pop(endpoint, None)


class StandIns:
    """A shard's stand-ins, one per driver endpoint; ``emit_out(endpoint, call)`` sends a call
    back, ``new_id`` invents ids (:func:`provisional_ids`)."""

    def __init__(self, emit_out: Callable[[int, Any], None], new_id: Callable[[], str]) -> None:
        self._emit_out = emit_out
        self._new_id = new_id
        self._by_endpoint: dict[int, Any] = {}
        self._refs: dict[int, EndpointRef] = {}  # id(stand-in) -> its endpoint (stand-ins live on)

    def resolve(self, ref: EndpointRef) -> Any:
        """What actors here hold for the endpoint ``ref`` names (made on first use)."""
        endpoint, kind = ref
        stand_in = self._by_endpoint.get(endpoint)
        if stand_in is None:
            stand_in = self._by_endpoint[endpoint] = kind.stand_in(functools.partial(self._emit_out, endpoint), self._new_id)
            self._refs[id(stand_in)] = ref
        return stand_in

    def reference(self, stand_in: Any) -> EndpointRef | None:
        return self._refs.get(id(stand_in))


def provisional_ids(incarnation: str) -> Callable[[], str]:
    """Ids a shard incarnation's stand-ins invent: unique across shards and restarts."""
    counter = itertools.count(1)
    return lambda: f"{incarnation}.{next(counter)}"
