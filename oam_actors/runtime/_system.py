"""``ActorSystem``: the seam every runtime implements; ``SystemBase``: the lifecycle they share.

Contract, the same on every runtime:

- An actor is addressed by ``Address(kind, id)``; one live actor per address per system.
- ``spawn`` is synchronous: it registers the actor and starts it. Messages sent right after
  are queued and handled after ``on_start``.
- Ordered messages of one actor run one at a time in arrival order; different actors run
  concurrently. Control messages run beside the ordered lane.
- Nobody waits forever: when an actor stops, every pending reply resolves, and a call on the
  control lane raises ``ActorStopped``.
- Messages and replies are plain serialisable values, so an actor may live in another process.

``SystemBase`` is that contract's lifecycle, written once for ``LocalSystem`` and ``RaySystem``:
the states (``SystemState``), entering once, the checks before a spawn and the close sequence,
as small steps; a runtime fills in where actors live (``_open``, ``_host``, ``stop``,
``_release``).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from types import TracebackType
from typing import Self

import anyio

from oam_actors.runtime._actor import Actor
from oam_actors.runtime._address import Address
from oam_actors.runtime._durable import Durability
from oam_actors.runtime._errors import ActorExists
from oam_actors.runtime._ref import ActorRef

__all__ = ["DEFAULT_MAX_QUEUE", "ActorSystem", "ExcInfo", "SystemBase", "SystemState"]

DEFAULT_MAX_QUEUE = 1024

ExcInfo = tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
"""What ``__aexit__`` is given: the exception leaving the block, if any."""


class ActorSystem(abc.ABC):
    """Creates, finds and stops actors; used as ``async with System(...) as system``.

    Leaving the ``async with`` block stops every actor (as ``aclose``).
    """

    durability: Durability | None = None
    """Where this system's durable objects' commits go (``None``: nowhere; see ``Durability``)."""

    @abc.abstractmethod
    def spawn(self, address: Address, factory: Callable[[], Actor], *, max_queue: int | None = None) -> ActorRef:
        """Create the actor ``factory()`` at ``address``, start it and return its ref.

        ``max_queue`` bounds its ordered lane (the system default if ``None``). Raises
        ``ActorExists`` if the address is taken (by a live or still-stopping actor) and
        ``RuntimeError`` if the system is not open. ``factory`` runs on the caller's task.
        """

    @abc.abstractmethod
    def lookup(self, address: Address) -> ActorRef | None:
        """The ref of the actor at ``address`` (live or still stopping), or ``None``."""

    @abc.abstractmethod
    def addresses(self, kind: str | None = None) -> list[Address]:
        """Addresses of the actors present, in spawn order, optionally only of one ``kind``."""

    @abc.abstractmethod
    async def stop(self, address: Address) -> bool:
        """Stop the actor at ``address`` gracefully; ``False`` if there was none.

        New messages are refused at once (``ActorStopped``). The running message is cancelled
        unless committed (a committed one finishes and delivers its result); it and every
        queued message resolve with ``ActorStopped``, in queue order. Control calls in flight
        are cancelled and raise ``ActorStopped``. Then ``on_stop`` runs, the address is free
        again, and this returns; it raises what ``on_stop`` raised. An actor must not await its
        own stop from ``on_stop`` or a committed section: that waits for itself.
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Stop every actor as ``stop`` does, concurrently; then no more spawns.

        Raises an ``ExceptionGroup`` of the ``on_stop`` errors, once every actor has stopped.
        """

    @abc.abstractmethod
    async def __aenter__(self) -> Self: ...

    @abc.abstractmethod
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...


class SystemState(enum.Enum):
    """Where a system is in its life: ``NEW`` → (``async with``) ``OPEN`` → ``CLOSING`` → ``CLOSED``.

    Only an ``OPEN`` system spawns. ``aclose`` on a ``NEW`` system closes it for good.
    """

    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class SystemBase(ActorSystem):
    """The lifecycle every runtime here shares; ``max_queue`` is the default bound per actor.

    A subclass says where actors live: ``_open`` (entering the ``async with``), ``_host`` (place
    a built actor, return its ref), ``stop``, ``lookup``, ``addresses`` and ``_release`` (after
    every actor has stopped on leaving the block).
    """

    def __init__(self, *, max_queue: int = DEFAULT_MAX_QUEUE) -> None:
        self._max_queue = _checked_bound(max_queue)
        self._state = SystemState.NEW

    # --- entering and leaving --------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state is not SystemState.NEW:
            raise RuntimeError(f"a {type(self).__name__} can be entered only once")
        await self._open()
        self._state = SystemState.OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            await self._close_on_exit()
        finally:
            suppress = await self._release((exc_type, exc, tb))
        return suppress

    async def _close_on_exit(self) -> None:
        """Leaving the block closes the system (a runtime may shield this from cancellation)."""
        await self.aclose()

    @abc.abstractmethod
    async def _open(self) -> None:
        """Make the system ready to host actors (runs once, on entering)."""

    @abc.abstractmethod
    async def _release(self, exc_info: ExcInfo) -> bool | None:
        """Release what ``_open`` took, after ``aclose`` (even if it failed); ``exc_info`` and
        the return value are ``__aexit__``'s."""

    # --- spawning --------------------------------------------------------------------------

    def spawn(self, address: Address, factory: Callable[[], Actor], *, max_queue: int | None = None) -> ActorRef:
        bound = self._admit(address, max_queue)
        return self._host(address, self._build(address, factory), bound)

    def _admit(self, address: Address, max_queue: int | None) -> int:
        """Check that ``address`` may be spawned now; the bound of its ordered lane."""
        if self._state is not SystemState.OPEN:
            raise RuntimeError(f"cannot spawn {address}: the system is {self._state.value}")
        if self._hosts(address):
            raise ActorExists(address)
        return self._max_queue if max_queue is None else _checked_bound(max_queue)

    def _hosts(self, address: Address) -> bool:
        """Whether this system hosts an actor at ``address``."""
        return self.lookup(address) is not None

    @staticmethod
    def _build(address: Address, factory: Callable[[], Actor]) -> Actor:
        actor = factory()
        if not isinstance(actor, Actor):
            raise TypeError(f"factory for {address} returned {type(actor).__name__}, not an Actor")
        return actor

    @abc.abstractmethod
    def _host(self, address: Address, actor: Actor, max_queue: int) -> ActorRef:
        """Start ``actor`` (built, not yet started) at the free ``address``; its ref."""

    # --- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._state in (SystemState.NEW, SystemState.CLOSED):
            self._state = SystemState.CLOSED
            return
        self._state = SystemState.CLOSING
        errors = await self._stop_all()
        self._state = SystemState.CLOSED
        if errors:
            raise ExceptionGroup("on_stop failed for some actors", errors)

    async def _stop_all(self) -> list[Exception]:
        """Stop every actor as ``stop`` does, concurrently; what their ``on_stop`` raised."""
        errors: list[Exception] = []

        async def stop_one(address: Address) -> None:
            try:
                await self.stop(address)
            except Exception as exc:  # noqa: BLE001 - gathered, raised by aclose
                errors.append(exc)

        async with anyio.create_task_group() as stopping:
            for address in self.addresses():
                stopping.start_soon(stop_one, address)
        return errors


def _checked_bound(max_queue: int) -> int:
    if max_queue < 1:
        raise ValueError(f"max_queue must be at least 1, got {max_queue}")
    return max_queue
