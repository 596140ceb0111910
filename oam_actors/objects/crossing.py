"""How object actors' outlets and shared documents cross to another process (for runtimes that
move actors, such as ``RaySystem``), declared to the runtime (:mod:`oam_actors.runtime`'s
``register_endpoint`` / ``register_shared``) when this package is imported.

**Outlets are endpoints.** The real outlet (a connection's bridge) stays with the connection; an
actor elsewhere holds an :class:`OutletStandIn`, which turns each call into a :data:`OutletCall`
value; the runtime carries those back in order to an :class:`OutletRelay`, which calls the
bridge. ``tool/call`` ids are ``t-<n>`` per connection and only the bridge can number them, so
the stand-in answers ``call_tool`` with a provisional id and the relay maps it to the bridge's id
when the call arrives: it rewrites the ``id`` of ``tool/cancel`` notifications and translates
``release_tool``. Provisional ids never reach the client. A ``tool/cancel`` may follow its call's
release (a timeout reports the completion first, then cancels), always right after it in the same
stream, so the relay remembers the last :data:`RELEASED_KEPT` released ids.

**A world's document is shared.** A :class:`~oam_actors.game.WorldState` handed out by
``WorldShare`` is shared by reference with the NPCs on the world (and its conversations); it
leaves its process as a copy without its observers. Holders in another process get a
:class:`WorldReplica` (:data:`WORLD_REPLICATION`): it reads as the document did when copied, plus
every change of the world's document since, pushed in order; a write through it is made on it at
once (a world tool reads its own writes) and sent to the world actor as the world method that
makes it (``WorldSet``, ``WorldMerge``, ``WorldRemove``), which commits and checkpoints it there
and notifies the world's subscribers. Concurrent writes from several processes end as the world
actor ordered them.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Callable
from typing import Any

import msgspec

from ..agent import ToolCall
from ..game import MISSING, Change, WorldPath, WorldState
from ..runtime import Address, register_endpoint, register_shared
from .outlet import Outlet, RequestId
from .world import WorldMerge, WorldRemove, WorldSet

__all__ = [
    "OUTLETS",
    "RELEASED_KEPT",
    "CallTool",
    "Notify",
    "OutletCall",
    "OutletKind",
    "OutletRelay",
    "OutletStandIn",
    "Release",
    "WORLD_REPLICATION",
    "WorldReplica",
    "WorldReplication",
]

RELEASED_KEPT = 1024

_OUTLET_METHODS = ("notify", "call_tool", "release_tool")


class Notify(msgspec.Struct, frozen=True, array_like=True):
    method: str
    params: dict[str, Any]


class CallTool(msgspec.Struct, frozen=True, array_like=True):
    provisional: str
    params_head: dict[str, Any]
    request_id: RequestId
    call: ToolCall
    target: Address


class Release(msgspec.Struct, frozen=True, array_like=True):
    tool_request_id: str


OutletCall = Notify | CallTool | Release


class OutletStandIn:
    """An outlet in another process: every call becomes ``emit(call)``."""

    def __init__(self, emit: Callable[[OutletCall], None], new_id: Callable[[], str]) -> None:
        self._emit = emit
        self._new_id = new_id

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._emit(Notify(method, params))

    def call_tool(self, params_head: dict[str, Any], request_id: RequestId, call: ToolCall, *, target: Address) -> str:
        provisional = self._new_id()
        self._emit(CallTool(provisional, params_head, request_id, call, target))
        return provisional

    def release_tool(self, tool_request_id: str) -> None:
        self._emit(Release(tool_request_id))


class OutletRelay:
    """Replays a stand-in's calls on the real outlet, mapping tool ids.

    Holds the outlet weakly: once its connection is gone, late calls are dropped.
    """

    def __init__(self, outlet: Outlet) -> None:
        self._outlet = weakref.ref(outlet)
        self._ids: dict[str, str] = {}  # provisional id -> the bridge's t-<n>
        self._released: collections.OrderedDict[str, str] = collections.OrderedDict()

    def deliver(self, call: OutletCall) -> None:
        outlet = self._outlet()
        if outlet is None:
            return
        match call:
            case Notify(method=method, params=params):
                outlet.notify(method, self._with_real_id(params) if method == "tool/cancel" else params)
            case CallTool(provisional=provisional, params_head=head, request_id=request_id, call=tool_call, target=target):
                self._ids[provisional] = outlet.call_tool(head, request_id, tool_call, target=target)
            case Release(tool_request_id=provisional):
                real = self._ids.pop(provisional, provisional)
                self._released[provisional] = real
                if len(self._released) > RELEASED_KEPT:
                    self._released.popitem(last=False)
                outlet.release_tool(real)

    def _with_real_id(self, params: dict[str, Any]) -> dict[str, Any]:
        provisional = params.get("id")
        real = self._ids.get(provisional) or self._released.get(provisional)  # type: ignore[arg-type]
        return params if real is None else {**params, "id": real}


class OutletKind:
    """The runtime's ``EndpointKind`` for outlets: any object with the :class:`Outlet` methods."""

    def matches(self, cls: type) -> bool:
        return all(callable(getattr(cls, name, None)) for name in _OUTLET_METHODS)

    def relay(self, endpoint: Any) -> OutletRelay:
        return OutletRelay(endpoint)

    def stand_in(self, emit: Callable[[Any], None], new_id: Callable[[], str]) -> OutletStandIn:
        return OutletStandIn(emit, new_id)

    def __reduce__(self) -> str:
        return "OUTLETS"  # travels by name: the one instance below


OUTLETS = OutletKind()

class WorldReplica(WorldState):
    """A world's document in another process than the world's (see the module docstring):
    ``forward(message)`` sends each write made through it to the world actor."""

    def __init__(self, copy: WorldState, forward: Callable[[Any], None]) -> None:
        super().__init__(copy.document, version=copy.version)
        self._forward = forward

    def set(self, path: str | WorldPath, value: Any) -> list[Change]:
        changes = super().set(path, value)
        self._forward(WorldSet(str(path), value))
        return changes

    def remove(self, path: str | WorldPath) -> tuple[Any, list[Change]]:
        removed = super().remove(path)
        self._forward(WorldRemove(str(path)))
        return removed

    def modify(self, path: str | WorldPath, transform: Callable[[Any], Any]) -> list[Change]:
        changes = super().modify(path, transform)
        value = self.get(path)
        self._forward(WorldRemove(str(path)) if value is MISSING else WorldSet(str(path), value))
        return changes

    def merge(self, path: str | WorldPath, patch: Any) -> list[Change]:
        changes = super().merge(path, patch)
        self._forward(WorldMerge(str(path), patch))
        return changes


WorldChange = tuple[str, bool, Any, int]
"""A change pushed to replicas: canonical path, whether it was removed, the new value, the version."""


class WorldReplication:
    """The runtime's ``Replication`` of world documents."""

    def replica(self, copy: WorldState, forward: Callable[[Any], None]) -> WorldReplica:
        return WorldReplica(copy, forward)

    def follow(self, state: WorldState, push: Callable[[WorldChange], None]) -> Callable[[], None]:
        def pushed(change: Change) -> None:
            removed = change.new is MISSING
            push((change.path, removed, None if removed else change.new, state.version))

        return state.observe("", pushed).cancel

    def apply(self, replica: WorldState, change: WorldChange) -> None:
        path, removed, new, version = change
        replica.adopt(path, MISSING if removed else new, version)

    def reset(self, replica: WorldState, copy: WorldState) -> None:
        replica.replace(copy)

    def __reduce__(self) -> str:
        return "WORLD_REPLICATION"


WORLD_REPLICATION = WorldReplication()

register_endpoint(OUTLETS)
register_shared(WorldState, lambda state: WorldState.from_json(state.to_json()), WORLD_REPLICATION)
