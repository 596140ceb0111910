"""WorldActor: one shared game world — a :class:`~oam_actors.game.WorldState` and its subscriptions.

Contract
--------
- Every world operation is one synchronous step of the actor (atomic): :class:`WorldGet`,
  :class:`WorldSet`, :class:`WorldMerge`, :class:`WorldRemove`, :class:`WorldSnapshot`,
  :class:`WorldSubscribe`, :class:`WorldUnsubscribe`, :class:`WorldEndSubscriptions`,
  :class:`WorldDescribe`. Replies are protocol results; ``path`` is echoed as sent.
- A malformed path, a write through a scalar, a bad list index or a non-object root is
  ``-32054 world_error`` (``data.world``, ``data.path``); an error changes nothing.
- A subscription is an observer of the document: its ``world/changed`` notifications go to the
  subscriber's outlet synchronously inside the change, so they precede the response of whatever
  caused it — a world method or an NPC's ``update_world_state`` call during a turn.
- :class:`WorldShare` (control lane) hands out the document itself to NPCs hosted in the same
  process, which read and write it directly through their world tools.
- Checkpoints (``snapshot``/``restore``, for runtimes with a state store): the document, its
  version and the subscriptions (id, path, subscriber's outlet), after every change through the
  world methods and every subscribe or unsubscribe. A restored world notifies its subscribers
  again (a remote runtime gives it a stand-in of the same outlet; in one process, where the
  outlet is gone with its process, the subscription is dropped).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import anyio
import msgspec

from ..game import MISSING, Change, Observation, WorldPath, WorldState, WorldStateError
from ..runtime import Actor, dumps_state, loads_state
from .outlet import Outlet
from .session import object_id

__all__ = [
    "WorldActor",
    "WorldDescribe",
    "WorldEndSubscriptions",
    "WorldGet",
    "WorldMerge",
    "WorldRemove",
    "WorldSet",
    "WorldShare",
    "WorldSnapshot",
    "WorldSubscribe",
    "WorldUnsubscribe",
]

_log = logging.getLogger(__name__)


class WorldGet(msgspec.Struct, frozen=True):
    path: str = ""


class WorldSet(msgspec.Struct, frozen=True):
    path: str
    value: Any


class WorldMerge(msgspec.Struct, frozen=True):
    path: str
    patch: Any


class WorldRemove(msgspec.Struct, frozen=True):
    path: str


class WorldSnapshot(msgspec.Struct, frozen=True):
    pass


class WorldDescribe(msgspec.Struct, frozen=True):
    """``{"version"}``: what ``world/list`` needs from the world itself."""


class WorldSubscribe(msgspec.Struct, frozen=True):
    subscription: str
    path: str
    outlet: Outlet


class WorldUnsubscribe(msgspec.Struct, frozen=True):
    subscription: str


class WorldEndSubscriptions(msgspec.Struct, frozen=True):
    """End every subscription (the world is being deleted); replies how many there were."""


class WorldShare(msgspec.Struct, frozen=True):
    """Control lane: the :class:`WorldState` itself, for NPCs in this process."""


@dataclasses.dataclass
class _Subscription:
    path: str
    outlet: Outlet
    observation: Observation | None = None


class WorldActor(Actor):
    """See the module docstring."""

    def __init__(self, state: WorldState) -> None:
        self.state = state
        self._subscriptions: dict[str, _Subscription] = {}
        self._snapshot: tuple[tuple[WorldState, int, list[Any]], bytes] | None = None  # the last one, and of what

    @property
    def world_id(self) -> str:
        return object_id(self.address)

    async def handle(self, message: Any) -> Any:
        if isinstance(message, _COMMITTED):
            self.commit()  # one synchronous step: checkpointed once it is done
        try:
            return self._apply(message)
        except WorldStateError as error:
            raise error.to_protocol(self.world_id, getattr(message, "path", error.path)) from None

    async def handle_control(self, message: Any) -> Any:
        if isinstance(message, WorldShare):
            return self.state
        raise TypeError(f"WorldActor cannot handle {type(message).__name__} on the control lane")

    def _apply(self, message: Any) -> Any:
        state, world = self.state, self.world_id
        match message:
            case WorldGet(path=path):
                WorldPath.parse(path)  # get reads a malformed path as absent; the protocol refuses it
                value = state.get(path)
                exists = value is not MISSING
                return {"world": world, "path": path, "value": value if exists else None, "exists": exists,
                        "version": state.version}
            case WorldSet(path=path, value=value):
                state.set(path, value)
                return {"world": world, "path": path, "version": state.version}
            case WorldMerge(path=path, patch=patch):
                state.merge(path, patch)
                return {"world": world, "path": path, "version": state.version}
            case WorldRemove(path=path):
                old, _ = state.remove(path)
                removed = old is not MISSING
                return {"world": world, "path": path, "removed": removed, "oldValue": old if removed else None,
                        "version": state.version}
            case WorldSnapshot():
                return {"world": world, "state": state.snapshot(), "version": state.version}
            case WorldDescribe():
                return {"version": state.version}
            case WorldSubscribe(subscription=subscription, path=path, outlet=outlet):
                self._observe(subscription, _Subscription(path, outlet))
                return {"subscription": subscription, "world": world, "path": path}
            case WorldUnsubscribe(subscription=subscription):
                ended = self._subscriptions.pop(subscription, None)
                if ended is not None and ended.observation is not None:
                    ended.observation.cancel()
                return ended is not None
            case WorldEndSubscriptions():
                ended = len(self._subscriptions)
                self._end_subscriptions()
                return ended
        raise TypeError(f"WorldActor cannot handle {type(message).__name__}")

    def _observe(self, subscription: str, record: _Subscription) -> None:
        record.observation = self.state.observe(record.path, _notifier(record.outlet, self.world_id, subscription))
        self._subscriptions[subscription] = record

    def _end_subscriptions(self) -> None:
        for record in self._subscriptions.values():
            if record.observation is not None:
                record.observation.cancel()
        self._subscriptions.clear()

    def snapshot(self) -> bytes:
        # Taken again after each commit of an NPC sharing the document (it may have written to
        # it), mostly unchanged: the same bytes then, not rebuilt (a runtime sends no repeat).
        subscriptions = [(sid, record.path, record.outlet) for sid, record in self._subscriptions.items()]
        key = (self.state, self.state.version, subscriptions)
        if self._snapshot is None or not _same(self._snapshot[0], key):
            self._snapshot = key, dumps_state((self.state.to_json(), subscriptions))
        return self._snapshot[1]

    def restore(self, state: bytes) -> None:
        document, subscriptions = loads_state(state)
        self.state = WorldState.from_json(document)
        # Observed in on_start: the notifications name the world, known once the actor is hosted.
        self._subscriptions = {
            sid: _Subscription(path, outlet) for sid, path, outlet in subscriptions if outlet is not None
        }

    async def on_start(self) -> None:
        for subscription, record in list(self._subscriptions.items()):
            if record.observation is None:
                self._observe(subscription, record)

    async def on_stop(self) -> None:
        # NPCs may keep the document after the world is gone; its subscribers must not hear more.
        self._end_subscriptions()


# Each one synchronous step; subscriptions are part of the checkpoint too.
_COMMITTED = (WorldSet, WorldMerge, WorldRemove, WorldSubscribe, WorldUnsubscribe, WorldEndSubscriptions)


def _notifier(outlet: Outlet, world: str, subscription: str) -> Callable[[Change], None]:
    def notify(change: Change) -> None:
        params = {"world": world, "subscription": subscription, **msgspec.to_builtins(change)}
        try:
            outlet.notify("world/changed", params)
        except (anyio.ClosedResourceError, anyio.WouldBlock):
            # The subscriber's connection is closing or not reading; the change itself stands.
            _log.info("world/changed for %s not delivered: the connection is not writable", subscription)

    return notify


def _same(a: tuple[WorldState, int, list[Any]], b: tuple[WorldState, int, list[Any]]) -> bool:
    """The same document object at the same version, with the same subscriptions (by identity:
    an outlet is compared as the object it is)."""
    return a[0] is b[0] and a[1] == b[1] and len(a[2]) == len(b[2]) and all(
        x[0] == y[0] and x[1] == y[1] and x[2] is y[2] for x, y in zip(a[2], b[2], strict=True))
