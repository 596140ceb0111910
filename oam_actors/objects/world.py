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
- Checkpoints (``snapshot``/``restore``, for runtimes with a state store): the document and its
  version, after every change through the world methods. Subscriptions are not part of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import msgspec

from ..game import MISSING, Change, Observation, WorldPath, WorldState, WorldStateError
from ..runtime import Actor
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


class WorldActor(Actor):
    """See the module docstring."""

    def __init__(self, state: WorldState) -> None:
        self.state = state
        self._subscriptions: dict[str, Observation] = {}

    @property
    def world_id(self) -> str:
        return object_id(self.address)

    async def handle(self, message: Any) -> Any:
        if isinstance(message, _CHANGES):
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
                observer = _notifier(outlet, world, subscription)
                self._subscriptions[subscription] = state.observe(path, observer)
                return {"subscription": subscription, "world": world, "path": path}
            case WorldUnsubscribe(subscription=subscription):
                observation = self._subscriptions.pop(subscription, None)
                if observation is not None:
                    observation.cancel()
                return observation is not None
            case WorldEndSubscriptions():
                ended = len(self._subscriptions)
                for observation in self._subscriptions.values():
                    observation.cancel()
                self._subscriptions.clear()
                return ended
        raise TypeError(f"WorldActor cannot handle {type(message).__name__}")

    def snapshot(self) -> bytes:
        return msgspec.json.encode(self.state.to_json())

    def restore(self, state: bytes) -> None:
        self.state = WorldState.from_json(msgspec.json.decode(state))

    async def on_stop(self) -> None:
        # NPCs may keep the document after the world is gone; its subscribers must not hear more.
        for observation in self._subscriptions.values():
            observation.cancel()
        self._subscriptions.clear()


_CHANGES = (WorldSet, WorldMerge, WorldRemove)


def _notifier(outlet: Outlet, world: str, subscription: str) -> Callable[[Change], None]:
    def notify(change: Change) -> None:
        params = {"world": world, "subscription": subscription, **msgspec.to_builtins(change)}
        try:
            outlet.notify("world/changed", params)
        except (anyio.ClosedResourceError, anyio.WouldBlock):
            # The subscriber's connection is closing or not reading; the change itself stands.
            _log.info("world/changed for %s not delivered: the connection is not writable", subscription)

    return notify
