"""``ActorCell``: hosts one actor in this process — its task, its mailbox, its control calls.

The actor task runs three phases: start (``on_start``), serve (the ordered lane until the
mailbox is closed and drained), stop (wait for control calls, then ``on_stop``). Teardown runs
on every exit path, even cancellation from outside, so every pending reply resolves.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from oam_actors.runtime._actor import HOST, Actor
from oam_actors.runtime._address import Address
from oam_actors.runtime._admission import Admission, AdmissionGate, current_flow
from oam_actors.runtime._envelope import Envelope
from oam_actors.runtime._errors import ActorStopped
from oam_actors.runtime._mailbox import Mailbox

__all__ = ["ActorCell", "Checkpoint", "new_cancel_scope"]

Checkpoint = Callable[[Address, bytes], Awaitable[None] | None]
"""Where a checkpointing system puts an actor's ``snapshot`` (a state store's ``put``); an
awaitable it returns is awaited before the message's reply resolves (the write is durable), and
if it raises, the message fails with that error and the actor is evicted (see ``_finish``)."""

logger = logging.getLogger("oam_actors.runtime")


_scope_type: type[anyio.CancelScope] | None = None


def new_cancel_scope() -> anyio.CancelScope:
    """A new cancel scope, made by the running backend's own class (found once: this system runs
    on asyncio, see ``_yielding``), so a message or control call costs no backend lookup and
    the scope is not initialised twice (``anyio.CancelScope()`` does both)."""
    global _scope_type
    if _scope_type is None:
        _scope_type = type(anyio.CancelScope())
    return _scope_type()


class CellState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class ActorCell:
    """One actor, its mailbox and the bookkeeping its task and its callers share."""

    def __init__(
        self,
        actor: Actor,
        address: Address,
        max_queue: int,
        on_exit: Callable[[ActorCell], None],
        checkpoint: Checkpoint | None = None,
        gate: AdmissionGate | None = None,
    ) -> None:
        self.actor = actor
        self.address = address
        self.mailbox = Mailbox(address, max_queue)
        self.state = CellState.STARTING
        self._on_exit = on_exit
        self._checkpoint = checkpoint
        self._gate = gate
        # Made when someone first waits: most actors are never waited on, and a crowd holds
        # thousands of idle cells (an anyio Event is about 1 KB with its waiter deque).
        self._started: anyio.Event | None = None
        self._exited: anyio.Event | None = None
        self._has_exited = False
        self._controls: set[anyio.CancelScope] = set()
        self._controls_idle: anyio.Event | None = None
        self._start_error: Exception | None = None
        self._stop_error: Exception | None = None

    # -- called by refs and the system, on their own tasks --------------------------------

    def enqueue(self, message: Any, *, tell: bool) -> Envelope:
        gate = self._gate
        envelope = Envelope(message, tell=tell, ticket=0 if gate is None else gate.next_ticket(), flow=current_flow())
        # Only an idle running actor's next message goes straight on to the gate; one queued
        # behind other work would hold its flow's later tickets for as long as that work runs.
        idle = gate is not None and self.state is CellState.RUNNING and self.mailbox.idle
        if idle and isinstance(message, self.actor.admitted_first):
            # Its place at the gate is taken now, and the actor task is woken only once it holds a
            # slot: a queued message is a record at the gate, not a handler waiting there.
            assert gate is not None
            self.mailbox.put_nowait(envelope, wake=False)
            envelope.reservation = reservation = gate.reserve(envelope.ticket, envelope.flow, self.mailbox.wake)
            if reservation.ready:
                self.mailbox.wake()
            return envelope
        self.mailbox.put_nowait(envelope)
        if idle:
            assert gate is not None
            envelope.arrival = gate.expect(envelope.ticket, envelope.flow)
        return envelope

    async def control(self, message: Any) -> Any:
        if self.state is CellState.STARTING:
            if self._started is None:
                self._started = anyio.Event()
            await self._started.wait()
        if self.state is not CellState.RUNNING:
            raise self._stopped_error()
        with new_cancel_scope() as scope:
            self._controls.add(scope)
            try:
                return await self.actor.handle_control(message)
            finally:
                self._control_ended(scope)
        # Only reached when ``request_stop`` cancelled the scope.
        raise self._stopped_error()

    def cancel_all(self) -> int:
        return sum(1 for envelope in self.mailbox.pending() if envelope.cancel())

    def request_stop(self) -> None:
        """Begin stopping without waiting; see ``ActorSystem.stop``."""
        if self.state in (CellState.STOPPING, CellState.STOPPED):
            return
        self.state = CellState.STOPPING
        self.mailbox.close()
        if self.mailbox.running is not None:
            self.mailbox.running.abort(ActorStopped)
        for scope in tuple(self._controls):
            scope.cancel()

    async def stop(self) -> None:
        self.request_stop()
        if not self._has_exited:
            if self._exited is None:
                self._exited = anyio.Event()
            await self._exited.wait()
        if self._stop_error is not None:
            raise self._stop_error

    # -- the actor task ---------------------------------------------------------------------

    async def run(self) -> None:
        HOST.set(self)
        try:
            if await self._start():
                await self._serve()
                await self._wait_controls()
                await self._stop_actor()
        finally:
            self._teardown()

    def commit_running(self) -> None:
        running = self.mailbox.running
        if running is None:
            raise RuntimeError("commit() is only valid inside this actor's handle()")
        if running.aborted is not None:
            raise running.aborted(self.address)
        running.mark_committed()

    def admission_of_running(self) -> Admission:
        running = self.mailbox.running
        if running is None:
            raise RuntimeError("admission() is only valid inside this actor's handle()")
        reservation = running.reservation
        if reservation is not None and not reservation.claimed:
            return reservation.claim()
        return Admission(self._gate, running.ticket, running.flow)

    async def _start(self) -> bool:
        try:
            await self.actor.on_start()
        except Exception as exc:
            logger.error("%s: on_start failed; the actor stops", self.address, exc_info=exc)
            self._start_error = exc
            return False
        if self.state is CellState.STARTING:
            self.state = CellState.RUNNING
        if self._started is not None:
            self._started.set()
        return True

    async def _serve(self) -> None:
        mailbox = self.mailbox
        while True:
            # One cancel scope for as many messages as no cancel cuts short (a cancelled scope is
            # spent): only a running message's abort cancels it (``Envelope.abort``), never one
            # queued or done, so nothing but that message's handler is cut short by it.
            with new_cancel_scope() as scope:
                while (envelope := await mailbox.get()) is not None:
                    if envelope.aborted is not None:
                        mailbox.drop(envelope, envelope.aborted(self.address))
                    elif mailbox.closed:
                        mailbox.drop(envelope, self._stopped_error())
                    else:
                        mailbox.start(envelope, scope)
                        value: Any = None
                        error: Exception | None = None
                        try:
                            value = await self.actor.handle(envelope.message)
                        except Exception as exc:  # noqa: BLE001 - supervision: fails this message only
                            error = exc
                        await self._finish(envelope, value, error)
                        if scope.cancel_called:
                            break
                else:
                    return
            # The scope caught the cancel of the message it cut short (still running), if any.
            if (envelope := mailbox.running) is not None:
                await self._finish(envelope, None, None)

    async def _finish(self, envelope: Envelope, value: Any, error: Exception | None) -> None:
        if envelope.committed and self._checkpoint is not None:
            durable = self._save_state(self._checkpoint)
            if durable is not None and (failure := await self._made_durable(durable)) is not None:
                value, error = None, failure
        # A message whose cancel returned True resolves as cancelled, whatever the handler did.
        if envelope.aborted is not None:
            self.mailbox.drop(envelope, envelope.aborted(self.address))
        elif error is not None:
            self.mailbox.fail(envelope, error)
            if envelope.tell:
                logger.error("%s: handler failed on a told message", self.address, exc_info=error)
            await self._on_failure(error)
        else:
            self.mailbox.succeed(envelope, value)

    def _save_state(self, checkpoint: Checkpoint) -> Awaitable[None] | None:
        # Before the reply resolves, so whoever sees the reply can rely on the checkpoint.
        try:
            state = self.actor.snapshot()
            if state is not None:
                return checkpoint(self.address, state)
        except Exception as exc:  # the change stands; only its checkpoint is lost
            logger.error("%s: checkpoint failed", self.address, exc_info=exc)
        return None

    async def _made_durable(self, durable: Awaitable[None]) -> Exception | None:
        """Wait for the checkpoint's write; its error, after which the actor stops: its memory is
        ahead of its last durable state, and its next use must start from that state, not from
        this one. (Only the system's closing cancels this wait: the write goes on without it,
        and the message is left unanswered as a crash would leave it.)"""
        try:
            await durable
        except Exception as exc:  # noqa: BLE001 - this message fails with it (the store logged the cause)
            self.request_stop()
            return exc
        return None

    async def _on_failure(self, error: Exception) -> None:
        try:
            await self.actor.on_failure(error)
        except Exception as exc:
            logger.error("%s: on_failure failed", self.address, exc_info=exc)

    async def _wait_controls(self) -> None:
        while self._controls:
            self._controls_idle = anyio.Event()
            await self._controls_idle.wait()

    def _control_ended(self, scope: anyio.CancelScope) -> None:
        self._controls.discard(scope)
        if not self._controls and self._controls_idle is not None:
            self._controls_idle.set()

    async def _stop_actor(self) -> None:
        try:
            await self.actor.on_stop()
        except Exception as exc:  # noqa: BLE001 - raised by stop() once the address is free
            self._stop_error = exc

    def _teardown(self) -> None:
        self.state = CellState.STOPPED
        self.mailbox.close()
        for envelope in self.mailbox.take_all():
            self.mailbox.drop(envelope, self._stopped_error())
        if self._started is not None:
            self._started.set()
        self._on_exit(self)
        self._has_exited = True
        if self._exited is not None:
            self._exited.set()

    def _stopped_error(self) -> ActorStopped:
        error = ActorStopped(self.address)
        error.__cause__ = self._start_error
        return error
