"""``Envelope``: one ordered message in a local mailbox, and the ``Reply`` that answers it.

Lifecycle: queued -> running -> done, or queued -> done when it is dropped unrun (cancelled,
or the actor stopped). Only the actor task moves it forward; any task may ``cancel`` it.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from oam_actors.runtime._errors import MessageCancelled, RuntimeErrorBase
from oam_actors.runtime._ref import Reply

if TYPE_CHECKING:
    from oam_actors.runtime._admission import Arrival, Reservation

__all__ = ["Envelope"]


class _Stage(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


class Envelope(Reply):
    """A message, where it stands, and its outcome once done."""

    __slots__ = (
        "_abort", "_callbacks", "_committed", "_error", "_event", "_scope", "_stage", "_value", "arrival", "flow",
        "message", "reservation", "tell", "ticket",
    )

    def __init__(self, message: Any, *, tell: bool = False, ticket: int = 0, flow: str = "") -> None:
        self.message = message
        self.tell = tell
        self.ticket = ticket  # arrival order at the system's admission gate
        self.flow = flow  # whose work it is there (see ``runtime.flow``)
        # On its way to the gate (set by the cell): closed once the handler first waits, or the
        # message is cancelled or resolves, so no path leaves its flow held behind it.
        self.arrival: Arrival | None = None
        # Its place at the gate taken at arrival (set by the cell): it starts once that holds a
        # slot, which its handler's admission then holds; closed if it never gets that far.
        self.reservation: Reservation | None = None
        self._stage = _Stage.QUEUED
        self._value: Any = None
        self._error: BaseException | None = None
        # Created only when someone waits before the outcome is known: most asks are awaited
        # at once, but tells never are.
        self._event: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._abort: type[RuntimeErrorBase] | None = None
        self._committed = False
        self._callbacks: list[Callable[[Any, BaseException | None], None]] | None = None

    # -- Reply --------------------------------------------------------------------------

    def done(self) -> bool:
        return self._stage is _Stage.DONE

    async def wait(self) -> Any:
        if self._stage is _Stage.DONE:
            await anyio.lowlevel.checkpoint()
        else:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def add_done_callback(self, fn: Callable[[Any, BaseException | None], None]) -> None:
        if self._stage is _Stage.DONE:
            fn(self._value, self._error)
        elif self._callbacks is None:
            self._callbacks = [fn]
        else:
            self._callbacks.append(fn)

    def cancel(self) -> bool:
        return self.abort(MessageCancelled)

    # -- driven by the actor task ---------------------------------------------------------

    @property
    def waiting(self) -> bool:
        """Queued for a slot it reserved (``reservation``), not ready to start yet."""
        reservation = self.reservation
        return reservation is not None and self._abort is None and not reservation.ready

    @property
    def committed(self) -> bool:
        """Whether the handler passed its point of no return (``Actor.commit``)."""
        return self._committed

    @property
    def aborted(self) -> type[RuntimeErrorBase] | None:
        """The error class this message resolves with because it was cancelled, if it was."""
        return self._abort

    def abort(self, error_type: type[RuntimeErrorBase]) -> bool:
        """Cancel with ``error_type`` as the outcome; ``False`` if too late or already aborted."""
        if self._stage is _Stage.DONE or self._abort is not None or self._committed:
            return False
        self._abort = error_type
        if self.arrival is not None:
            self.arrival.close()  # it will never ask for admission now
        if self.reservation is not None and self._stage is _Stage.QUEUED:
            self.reservation.close()  # its place goes to the next one now, not when it is dropped
        if self._scope is not None:
            self._scope.cancel()
        return True

    def begin(self, scope: anyio.CancelScope) -> None:
        """The handler starts under ``scope``."""
        self._stage = _Stage.RUNNING
        self._scope = scope
        if self.arrival is not None:
            # Runs once the handler first waits: a handler that asks for admission is at the gate by then.
            asyncio.get_running_loop().call_soon(self.arrival.close)

    def mark_committed(self) -> None:
        """Pass the point of no return (the caller checked that no cancel won)."""
        self._committed = True

    def resolve(self, value: Any = None, error: BaseException | None = None) -> None:
        """Record the outcome and wake the waiter."""
        self._stage = _Stage.DONE
        self._scope = None
        if self.arrival is not None:
            self.arrival.close()
        if self.reservation is not None:
            self.reservation.close()
        self._value = value
        self._error = error
        if self._callbacks is not None:
            for fn in self._callbacks:
                fn(value, error)
            self._callbacks = None
        if self._event is not None:
            self._event.set()
