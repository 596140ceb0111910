"""The two sides of the runtime's contract: the ``Actor`` base class (private state behind two
lanes, and its lifecycle hooks) and ``ActorSystem``, the seam every runtime implements (an actor
knows its system, a system hosts actors, so they live together).

An actor is created by its system (``ActorSystem.spawn``) and runs on one task of its own, the
*actor task*, which runs ``on_start``, then every ordered message through ``handle`` one at a
time in arrival order, then ``on_stop``. Control messages (``handle_control``) run on the task of
whoever called ``ActorRef.ask_control``, concurrently with the ordered lane, so they are never
queued behind a slow ordered message. Nothing else may touch the actor's state from outside.
"""

from __future__ import annotations

import abc
import contextvars
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

from oam_actors.runtime._address import Address
from oam_actors.runtime._durable import Durability
from oam_actors.runtime._ref import ActorRef

if TYPE_CHECKING:
    from oam_actors.runtime._admission import Admission

__all__ = ["Actor", "ActorSystem"]


class _Host(Protocol):
    """What hosts an actor task: the runtime's per-actor cell, seen from ``Actor.commit``."""

    actor: Actor

    def commit_running(self) -> None: ...

    def admission_of_running(self) -> Admission: ...


# Set once on each actor task to the cell hosting it, so ``commit`` knows which message is
# "current" and rejects calls from other tasks (control handlers, other actors).
HOST: contextvars.ContextVar[_Host | None] = contextvars.ContextVar("oam_actors_host", default=None)


class Actor:
    """Subclass this and override the hooks you need; every hook is optional.

    ``self.address`` and ``self.system`` are set before ``on_start`` runs. Message values and
    replies should be plain serialisable values (msgspec Structs, JSON-able data) so the same
    actor can be hosted by a remote system.
    """

    address: Address
    system: ActorSystem

    async def on_start(self) -> None:
        """Runs first on the actor task, before any ordered message.

        Messages sent meanwhile are queued; control messages wait for it. If it raises, the
        error is logged, ``on_stop`` does not run, every queued reply resolves with
        ``ActorStopped`` (chained from the error) and the address is freed.
        """

    async def handle(self, message: Any) -> Any:
        """Handle one ordered message on the actor task; the return value is the reply.

        One message at a time, in arrival order. Runs in a cancel scope that ``Reply.cancel``,
        ``ActorRef.cancel_all`` and ``stop`` cancel unless ``commit`` was called. If it raises
        an ``Exception``, only this message's reply fails (``Reply.wait`` raises that very
        exception), ``on_failure`` runs, and the actor goes on with the next message.
        """
        raise NotImplementedError(f"{type(self).__name__} handles no ordered messages")

    async def handle_control(self, message: Any) -> Any:
        """Handle one control message on the caller's task, concurrently with ``handle``.

        Served at once (after ``on_start``), never queued. Its exception propagates to that
        caller only; ``stop`` cancels it and the caller gets ``ActorStopped``.
        """
        raise NotImplementedError(f"{type(self).__name__} handles no control messages")

    async def on_failure(self, exc: Exception) -> None:
        """Runs on the actor task after ``handle`` raised ``exc`` (its reply already failed).

        If it raises, that error is logged and the actor goes on.
        """

    async def on_stop(self) -> None:
        """Runs last on the actor task, after the mailbox is drained and control calls ended.

        If it raises, the address is still freed and the error is raised by ``stop``.
        """

    def snapshot(self) -> bytes | None:
        """The actor's committed state for a state store, or ``None`` (the default: none kept).

        Called on the actor task after each ordered message that called ``commit``, before its
        reply resolves, and only by a system that checkpoints (``LocalSystem(checkpoint=…)``, a
        remote runtime). Keep it quick and side-effect free; if it raises, the error is logged
        and that change is not checkpointed.
        """
        return None

    def restore(self, state: bytes) -> None:
        """Load ``state`` (from ``snapshot``) into a freshly built actor, before ``on_start``.

        A runtime calls it when it re-creates an actor whose host failed. Only actors whose
        ``snapshot`` returns state need it.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps no state to restore")

    def commit(self) -> None:
        """Mark the ordered message being handled as past its point of no return.

        From then on ``Reply.cancel``, ``ActorRef.cancel_all`` and ``stop`` leave it running and
        it delivers its real result; shield what follows (``anyio.CancelScope(shield=True)``) so
        an outer cancellation cannot interrupt it either, and keep it bounded: ``stop`` waits.
        Call it from ``handle`` (or tasks it starts). Raises ``MessageCancelled`` if a cancel
        already won, ``RuntimeError`` outside ``handle``.
        """
        host = HOST.get()
        if host is None or host.actor is not self:
            raise RuntimeError("commit() is only valid inside this actor's handle()")
        host.commit_running()

    admitted_first: tuple[type, ...] = ()
    """Ordered messages of these types that reach an idle actor wait for a slot of the system's
    admission gate before their handler starts (with no task waiting for them); their handler's
    first :meth:`admission` holds that slot, and must be entered (``async with``). For messages
    whose handler asks for admission before anything else: a queued one then costs a record at
    the gate, not a started handler."""

    def admission(self) -> Admission:
        """The ordered message being handled, at its system's admission gate.

        ``async with self.admission():`` runs the block once one of the system's running slots
        is free, waiting flows (``runtime.flow``: who queued the message) in turn and each flow's
        messages in arrival order (the order they were queued, across every actor of the system);
        ``pause``/``resume`` give the slot up while waiting on
        something outside. Without a gate (``LocalSystem(max_running=None)``) it never waits.
        Use it for work that must not deadlock on itself: a holder must not wait for another
        message that needs a slot. Raises ``RuntimeError`` outside ``handle``.
        """
        host = HOST.get()
        if host is None or host.actor is not self:
            raise RuntimeError("admission() is only valid inside this actor's handle()")
        return host.admission_of_running()


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
