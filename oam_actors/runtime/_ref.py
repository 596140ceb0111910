"""Handles on actors: ``ActorRef`` (send to one actor) and ``Reply`` (the answer to one message).

Both are the seam between callers and an ``ActorSystem``: a system hands out its own subclasses,
and callers use only what is declared here, so the same calling code works whether the actor
lives in this process or elsewhere.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from oam_actors.runtime._address import Address
from oam_actors.runtime._statistics import ActorStatistics

__all__ = ["ActorRef", "Reply"]


class Reply(abc.ABC):
    """The future outcome of one ordered message (from ``ActorRef.ask_nowait``).

    Replies of one actor resolve in the order their messages were queued, cancelled ones
    included: a cancelled queued message resolves when it reaches the head of the queue.
    """

    __slots__ = ()

    @abc.abstractmethod
    def done(self) -> bool:
        """Whether the outcome is known (result, error, cancelled or stopped)."""

    @abc.abstractmethod
    async def wait(self) -> Any:
        """Wait for the outcome: the handler's result, or raise what it raised.

        Raises ``MessageCancelled`` if the message was cancelled and ``ActorStopped`` if the
        actor stopped before handling it. Cancelling the waiter does not cancel the message.
        """

    @abc.abstractmethod
    def add_done_callback(self, fn: Callable[[Any, BaseException | None], None]) -> None:
        """Call ``fn(value, error)`` once the outcome is known (at once if it already is).

        ``error`` is what ``wait`` would raise, else ``None``. It runs synchronously on the task
        that settles the reply, before waiters wake, so a host can forward outcomes in the order
        they happen; ``fn`` must be quick and must not raise.
        """

    @abc.abstractmethod
    def cancel(self) -> bool:
        """Cancel the message; ``True`` if this call cancelled it.

        Queued: it will not run. Running: its handler's cancel scope is cancelled. Either way
        ``wait`` raises ``MessageCancelled``. ``False`` if it already finished, was already
        cancelled, or its handler passed its point of no return (``Actor.commit``).
        """


class ActorRef(abc.ABC):
    """Sends messages to the actor at ``address``; from ``ActorSystem.spawn`` or ``lookup``.

    A ref outlives its actor: once the actor has stopped, sending raises ``ActorStopped``,
    even if a new actor was spawned at the same address (look it up again).
    """

    __slots__ = ("address",)

    address: Address

    @abc.abstractmethod
    def ask_nowait(self, message: Any) -> Reply:
        """Queue ``message`` on the ordered lane before returning; its ``Reply`` follows.

        Raises ``MailboxFull`` if ``max_queue`` messages are already waiting (the running one
        is not counted) and ``ActorStopped`` if the actor is stopping or gone.
        """

    async def ask(self, message: Any) -> Any:
        """``ask_nowait(message)`` then wait for its reply; raises as both of those do."""
        return await self.ask_nowait(message).wait()

    @abc.abstractmethod
    def tell_nowait(self, message: Any) -> None:
        """Queue ``message`` like ``ask_nowait`` and forget it: the reply is discarded.

        Raises ``MailboxFull``/``ActorStopped`` as ``ask_nowait``; a failing handler is logged.
        """

    @abc.abstractmethod
    async def ask_control(self, message: Any) -> Any:
        """Run ``handle_control(message)`` now, beside the ordered lane; return its result.

        Waits for ``on_start`` if the actor is still starting. Raises what the handler raised,
        or ``ActorStopped`` if the actor is stopping or gone or stops during the call.
        """

    @abc.abstractmethod
    def cancel_all(self) -> int:
        """Cancel the running message (unless committed) and every queued one.

        Returns how many this call cancelled; their replies raise ``MessageCancelled``.
        """

    @abc.abstractmethod
    def statistics(self) -> ActorStatistics:
        """A snapshot of the actor's mailbox counters."""
