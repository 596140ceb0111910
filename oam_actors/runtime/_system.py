"""``SystemBase``: the lifecycle every runtime's ``ActorSystem`` shares.

The contract of ``ActorSystem`` (:mod:`._actor`), the same on every runtime:

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

from oam_actors.runtime._actor import Actor, ActorSystem
from oam_actors.runtime._address import Address
from oam_actors.runtime._errors import ActorExists
from oam_actors.runtime._ref import ActorRef

__all__ = ["DEFAULT_MAX_QUEUE", "ExcInfo", "SystemBase", "SystemState"]

DEFAULT_MAX_QUEUE = 1024

ExcInfo = tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
"""What ``__aexit__`` is given: the exception leaving the block, if any."""


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
