"""The method registry and the extension API.

A method handler is ``async def handler(call: Call) -> result | Deferred``. The bridge awaits the
handler before it looks at the next line, so everything a handler does before returning happens in
arrival order (validate, create the object, queue the turn). Long work is returned as a
:class:`Deferred`: the bridge awaits it concurrently and answers when it finishes.

An :class:`Extension` registers its own methods and notifications (the game layer does).
Handlers and extensions see the bridge that runs them as a :class:`HandlerBridge`: what they may
use of it, which :class:`~oam_actors.bridge.bridge.Bridge` provides. This module imports nothing
of the bridge itself, so the bridge and the core methods both build on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from ..objects import Outlet
from ..runtime import Actor, ActorRef, ActorSystem, Address, Durability, Reply, StoreRecord
from .config import BridgeConfig, ModelFactory
from .params import Params

__all__ = ["Call", "Deferred", "Extension", "Handler", "HandlerBridge", "MethodRegistry", "Reviver"]


@dataclass(frozen=True, slots=True)
class Call:
    """One incoming request or notification as a handler sees it. ``id`` is ``None`` for a
    notification (whose result is discarded)."""

    bridge: HandlerBridge
    id: Any
    method: str
    params: Params

    @property
    def is_notification(self) -> bool:
        return self.id is None


class Deferred:
    """A result that arrives later: the bridge answers the request when ``awaitable`` finishes,
    or, built with :meth:`of_reply`, when an actor's ``reply`` resolves.

    Exceptions become the request's error response. A reply is answered from its done callback,
    on the task that settles it: no task of the bridge's and no wake-up per request (the common
    case: a queued turn or setting). ``in_order`` (an awaitable only): the answer keeps its place
    among the immediate methods' answers, which wait behind it (a creation waiting for its state
    store write while the bridge reads on, so creations share group commits).
    """

    __slots__ = ("_awaitable", "in_order", "reply", "settled")

    def __init__(self, awaitable: Awaitable[Any], *, in_order: bool = False) -> None:
        self._awaitable: Awaitable[Any] | None = awaitable
        self.in_order = in_order
        self.reply: Reply | None = None
        self.settled: Callable[[], None] | None = None

    @classmethod
    def of_reply(cls, reply: Reply, *, settled: Callable[[], None] | None = None) -> Deferred:
        """The outcome of ``reply``; ``settled`` runs (synchronously, must not raise) once it is known."""
        deferred = cls.__new__(cls)
        deferred._awaitable, deferred.reply, deferred.settled = None, reply, settled
        deferred.in_order = False
        return deferred

    @property
    def awaitable(self) -> Awaitable[Any]:
        """What to await for the result (for a reply: its ``wait``, then ``settled``)."""
        if self._awaitable is not None:
            return self._awaitable
        return self._wait_reply()

    async def _wait_reply(self) -> Any:
        assert self.reply is not None
        try:
            return await self.reply.wait()
        finally:
            if self.settled is not None:
                self.settled()


Handler = Callable[[Call], Awaitable[Any]]


class Extension(Protocol):
    """A bundle of methods: ``install`` registers them; ``aclose`` runs at shutdown."""

    def install(self, bridge: HandlerBridge) -> None: ...

    async def aclose(self) -> None: ...


class MethodRegistry:
    """Method name → handler, plus the notifications the bridge may send."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self.notifications: list[str] = []

    def register(self, method: str, handler: Handler) -> None:
        if method in self._handlers:
            raise ValueError(f"method {method!r} is already registered")
        self._handlers[method] = handler

    def add_notification(self, method: str) -> None:
        if method not in self.notifications:
            self.notifications.append(method)

    def get(self, method: str) -> Handler | None:
        return self._handlers.get(method)

    def names(self) -> list[str]:
        return sorted(self._handlers)


Reviver = Callable[["HandlerBridge", StoreRecord], Actor]
"""Builds a durable object of one kind again from its stored record (recipe and state)."""


class HandlerBridge(Outlet, Protocol):
    """The bridge as method handlers and extensions use it (``Call.bridge``, ``Extension.install``):
    one connection's objects, limits and configuration, and the outlet its objects write through.
    :class:`~oam_actors.bridge.bridge.Bridge` documents each member."""

    system: ActorSystem
    config: BridgeConfig
    system_model: ModelFactory | None
    registry: MethodRegistry
    revivers: dict[str, Reviver]
    namespace: str
    tenant: str
    shared: bool
    durability: Durability | None
    client_info: dict[str, Any] | None
    closed: anyio.Event

    def admit(self) -> None: ...

    def new_session_id(self) -> str: ...

    def new_local_id(self) -> str: ...

    def session_count(self) -> int: ...

    def address(self, kind: str, object_id: str) -> Address: ...

    def owns(self, address: Address) -> bool: ...

    def lookup(self, kind: str, object_id: str) -> ActorRef | None: ...

    def stored_ids(self, kind: str) -> list[str]: ...

    def created(self, ref: ActorRef, actor: Actor, recipe: bytes, result: Any, *,
                undo: Callable[[], None] | None = None) -> Any: ...

    def shares(self, holder: Address, owner: Address) -> None: ...

    async def delete_durable(self, address: Address) -> None: ...

    def enqueue(self, ref: ActorRef, message: Any) -> Deferred: ...

    def queued(self, reply: Reply, *, settled: Callable[[], None] | None = None) -> Deferred: ...

    async def shutdown(self) -> None: ...
