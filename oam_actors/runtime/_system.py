"""``ActorSystem``: the seam every runtime implements (``LocalSystem`` here, Ray shards later).

Contract, the same on every runtime:

- An actor is addressed by ``Address(kind, id)``; one live actor per address per system.
- ``spawn`` is synchronous: it registers the actor and starts it. Messages sent right after
  are queued and handled after ``on_start``.
- Ordered messages of one actor run one at a time in arrival order; different actors run
  concurrently. Control messages run beside the ordered lane.
- Nobody waits forever: when an actor stops, every pending reply resolves, and a call on the
  control lane raises ``ActorStopped``.
- Messages and replies are plain serialisable values, so an actor may live in another process.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from types import TracebackType
from typing import Self

from oam_actors.runtime._actor import Actor
from oam_actors.runtime._address import Address
from oam_actors.runtime._ref import ActorRef

__all__ = ["ActorSystem"]


class ActorSystem(abc.ABC):
    """Creates, finds and stops actors; used as ``async with System(...) as system``.

    Leaving the ``async with`` block stops every actor (as ``aclose``).
    """

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
