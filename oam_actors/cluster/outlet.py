"""A connection's :class:`~oam_actors.objects.Outlet` across the Ray boundary.

An object actor in a shard writes events and tool calls through an outlet; the real one (the
connection's bridge) lives in the driver. The actor gets a :class:`ShardOutlet` instead, which
turns each call into an item of the shard's ordered output stream; the driver hands those to an
:class:`OutletRelay` that calls the bridge, in order.

``tool/call`` ids are ``t-<n>`` per connection, and only the bridge can number them. So the shard
answers ``call_tool`` with a provisional id (``<incarnation>.<n>``), and the relay maps it to the
bridge's id when the call arrives: it rewrites the ``id`` of ``tool/cancel`` notifications and
translates ``release_tool``. Provisional ids never reach the client. A ``tool/cancel`` may follow
its call's release (a timeout reports the completion first, then cancels), always right after it
in the same stream, so the relay remembers the last :data:`RELEASED_KEPT` released ids.
"""

from __future__ import annotations

import collections
import itertools
import weakref
from collections.abc import Callable
from typing import Any

import msgspec

from ..agent import ToolCall
from ..objects import Outlet, RequestId
from ..runtime import Address

__all__ = [
    "RELEASED_KEPT",
    "CallTool",
    "Notify",
    "OutletCall",
    "OutletRelay",
    "Release",
    "ShardOutlet",
    "is_outlet",
    "provisional_ids",
]

RELEASED_KEPT = 1024

_OUTLET_METHODS = ("notify", "call_tool", "release_tool")
_outlet_types: dict[type, bool] = {}


def is_outlet(obj: Any) -> bool:
    """Whether ``obj`` has the :class:`~oam_actors.objects.Outlet` methods (cached per type)."""
    kind = type(obj)
    known = _outlet_types.get(kind)
    if known is None:
        known = _outlet_types[kind] = all(callable(getattr(kind, name, None)) for name in _OUTLET_METHODS)
    return known


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


class ShardOutlet:
    """The shard-side stand-in for one connection's outlet: every call becomes ``emit(call)``."""

    def __init__(self, emit: Callable[[OutletCall], None], ids: Callable[[], str]) -> None:
        self._emit = emit
        self._ids = ids

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._emit(Notify(method, params))

    def call_tool(self, params_head: dict[str, Any], request_id: RequestId, call: ToolCall, *, target: Address) -> str:
        provisional = self._ids()
        self._emit(CallTool(provisional, params_head, request_id, call, target))
        return provisional

    def release_tool(self, tool_request_id: str) -> None:
        self._emit(Release(tool_request_id))


def provisional_ids(incarnation: str) -> Callable[[], str]:
    """Provisional tool ids of one shard incarnation: unique across shards and restarts."""
    counter = itertools.count(1)
    return lambda: f"{incarnation}.{next(counter)}"


class OutletRelay:
    """The driver-side end: replays a shard's outlet calls on the real outlet, mapping tool ids.

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
