"""``CoalescingModel``: a :class:`~oam_actors.agent.LanguageModel` in front of one shared backend
that answers several waiting items with one generation (the contract is in the package
docstring; what may be combined and how the batch reads is :mod:`._policy`).

How a batch forms. Every step queues at the backend on its own ticket (its owner, priority and
deadline: its own place in fair queuing) and waits in its key's line. The step whose ticket the
backend admits first *leads*: only then (the seam :class:`DefersRequest`) does it take the steps
of its line still waiting, in the order the backend would have admitted them (up to what
:func:`._policy.pack` allows), each out of its own queue (:class:`~oam_actors.models.scheduler.Seat`,
charged in fair queuing as if admitted, using no quota), and build the prompt. Free quota means a
step is admitted at once, alone, and its own request runs as it is; under pressure the line
grows, and batches grow with it. A step whose own deadline passes first expires in its queue,
as it would alone. Before it queues, a step of NPC work may linger for company
(:meth:`._policy.CoalesceSettings.linger_for`): by default only while steps of its priority had
to queue (each step's wait for admission, a seat taken or a deadline passed in the queue feed
its priority's :class:`._policy.QueuePressure`), so with free capacity a lone bark goes at once.
Every step runs in its caller's task (no task of our own): cancelling a waiting step drops its
ticket; cancelling a leader mid-batch queues the others again.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import anyio
import msgspec

from ...agent.model import Availability, GenerationRequest, LanguageModel, ModelCapabilities, Usage, estimate_tokens
from ...clock import Clock, MonotonicClock
from ...errors import AgentError, ErrorCode
from ..scheduler import Seat, SeatTaken
from ._policy import Answer, CoalesceSettings, QueuePressure, apart, batch_key, batch_request, pack, read_batch

__all__ = ["CoalescingModel", "CoalescingStatistics", "DefersRequest", "open_coalesced"]

# A batch that fails with one of these failed for every item alike (quota, a device fault): each
# item gets the error, and its agent's own step retry decides (it comes back here and may batch
# again). Any other failure may be one item's doing (a safety block, a refusal): each item runs
# alone instead, so no item fails because of a neighbour.
_SHARED_FAILURES = frozenset({ErrorCode.RATE_LIMITED, ErrorCode.BUSY, ErrorCode.MODEL_UNAVAILABLE,
                              ErrorCode.GENERATION_FAILED})

_CUT_MARGIN_TOKENS = 2


@runtime_checkable
class DefersRequest(Protocol):
    """A backend that queues steps and can build a step's request when it is admitted.

    ``stream_when_admitted(request, build, seat)`` queues ``request`` (its owner, priority and
    token estimate) like :meth:`stream`, its ticket at ``seat`` while it waits (a reroute moves
    it); once the backend admits it, it calls ``build()`` exactly once and streams the request
    ``build`` returns in its place (a reroute to another device streams that same request). A
    seat taken while queued (another step's batch answers it) raises
    :class:`~oam_actors.models.scheduler.SeatTaken`. ``service(owner)`` is the owner's place in
    the backend's fair queuing (lower: less served), by which a batch takes its members.
    :class:`~oam_actors.models.pool.DevicePool` and :class:`~oam_actors.models.pool.ScheduledModel`
    implement it.
    """

    def stream_when_admitted(
        self, request: GenerationRequest, build: _Build, seat: Seat
    ) -> AsyncIterator[str | Usage]: ...

    def service(self, owner: str) -> float: ...


class _Build(Protocol):
    def __call__(self) -> GenerationRequest: ...


class CoalescingStatistics(msgspec.Struct, frozen=True, rename="camel"):
    """What coalescing did since the model started (``model/status``, camelCase).

    ``items``: steps that could be combined; ``generations``: the backend generations they used
    (batches, steps that ran alone, retries); ``served``: items a generation answered (from a
    batch, alone, or retried alone; not those that expired in the queue or failed);
    ``itemsPerGeneration`` is served items per generation; ``lingered``: items that waited for
    company before they queued. ``batches``
    answered two or more items (``batchedItems`` in all); ``retriedAlone`` items a batch did not
    answer (``missing``, ``invalid``, ``misattributed``, or the batch was refused for its content)
    ran again on their own; ``failed`` items got their batch's error (quota, a device fault, a
    timeout) and their own step retry decided. ``passthrough``: steps that could not be combined
    (no item, opted out, a repair).
    """

    items: int = 0
    generations: int = 0
    served: int = 0
    items_per_generation: float = 0.0
    lingered: int = 0
    batches: int = 0
    batched_items: int = 0
    answered: int = 0
    retried_alone: int = 0
    missing: int = 0
    invalid: int = 0
    misattributed: int = 0
    failed: int = 0
    passthrough: int = 0


class _Alone:
    """Run the step on its own (the batch did not answer it)."""


_ALONE = _Alone()


@dataclass(frozen=True)
class _Answered:
    text: str
    usage: Usage


@dataclass(frozen=True)
class _Failed:
    error: AgentError


@dataclass(frozen=True)
class _Requeue:
    """Queue again (the batch that took the step was abandoned before it answered)."""


_REQUEUE = _Requeue()
_Outcome = _Answered | _Failed | _Alone | _Requeue


@dataclass(eq=False)
class _Step:
    request: GenerationRequest
    deadline: float | None = None  # the request's own deadline (``queue_seconds``), on the clock
    seat: Seat = field(default_factory=Seat)  # its ticket's place at the backend, while queued
    lingering: anyio.CancelScope | None = None  # its linger before it queues, while it lasts
    outcome: _Outcome | None = None
    wake: anyio.Event = field(default_factory=anyio.Event)
    taken: bool = False  # in a batch another step's admission answers
    gone: bool = False  # its caller left: nothing to deliver

    def settle(self, outcome: _Outcome) -> None:
        self.outcome = outcome
        self.wake.set()


@dataclass(eq=False)
class _Line:
    """The steps of one batch key not yet admitted nor taken into a batch (lingering, or queued at
    the backend on their own tickets), in arrival order."""

    waiting: dict[_Step, None] = field(default_factory=dict)
    members: int = 0  # steps of this key not finished (the line is dropped at 0)


class CoalescingModel:
    """``backend`` with coalescing of combinable steps; see the package docstring. Share one
    instance, as the backend itself is shared (one per quota)."""

    def __init__(self, backend: LanguageModel, settings: CoalesceSettings | None = None, *,
                 clock: Clock | None = None) -> None:
        self.backend = backend
        self.settings = settings or CoalesceSettings()
        self._clock: Clock = clock or MonotonicClock()
        self._lines: dict[Hashable, _Line] = {}
        self._pressure: dict[str, QueuePressure] = {}  # by priority: the backend queues by priority
        self._counts = dict.fromkeys(CoalescingStatistics.__struct_fields__, 0)

    @property
    def capabilities(self) -> ModelCapabilities:
        return msgspec.structs.replace(self.backend.capabilities, coalesces=True)

    async def availability(self) -> Availability:
        return await self.backend.availability()

    async def statistics(self) -> msgspec.Struct | None:
        """The backend's statistics record with :meth:`coalescing_statistics` in its
        ``coalescing`` field when it has one (a device pool's), else the backend's record."""
        inner = getattr(self.backend, "statistics", None)
        record = inner() if inner is not None else None
        if inspect.isawaitable(record):  # a remote backend's statistics are asked over the network
            record = await record
        if record is not None and "coalescing" in type(record).__struct_fields__:
            return msgspec.structs.replace(record, coalescing=self.coalescing_statistics())
        return record

    def admission_wait(self, request: GenerationRequest) -> float:
        """The backend's wait for quota, where it can say (0 where it cannot)."""
        wait = getattr(self.backend, "admission_wait", None)
        return 0.0 if wait is None else float(wait(request))

    def coalescing_statistics(self) -> CoalescingStatistics:
        counts = dict(self._counts)
        if counts["generations"]:
            counts["items_per_generation"] = round(counts["served"] / counts["generations"], 3)
        return CoalescingStatistics(**counts)

    # --- one step ------------------------------------------------------------------------------

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        """The step's pieces: from a batch it was packed into, or from the backend directly.
        Raises what the backend raises for the step (or for its batch, where a batch's failure
        is every item's: rate limits, device faults)."""
        key = batch_key(request) if self.settings.max_items > 1 else None
        if key is None:
            self._counts["passthrough"] += 1
            async for piece in self._alone(request, count=False):
                yield piece
            return
        self._counts["items"] += 1
        line = self._lines.setdefault(key, _Line())
        line.members += 1
        try:
            step = _Step(request, self._deadline(request))
            while True:
                async for piece in self._lead(line, step):
                    yield piece
                if not isinstance(step.outcome, _Requeue):
                    break
                step.request = self._remaining(step)
                step.outcome, step.wake, step.seat, step.taken = None, anyio.Event(), Seat(), False
            outcome = step.outcome
        finally:
            line.members -= 1
            if not line.members:
                del self._lines[key]
        match outcome:
            case None:
                self._counts["served"] += 1
                return  # it ran on its own (alone in its batch): its own request streamed
            case _Answered(text=text, usage=usage):
                yield text
                yield usage
            case _Failed(error=error):
                self._counts["failed"] += 1
                raise AgentError(error.code, error.message, retry_after=error.retry_after) from error
            case _Alone():
                self._counts["retried_alone"] += 1
                # Its batch charged the item's owner for this action already.
                async for piece in self._alone(msgspec.structs.replace(request, follow_up=True)):
                    yield piece
                self._counts["served"] += 1

    async def _alone(self, request: GenerationRequest, *, count: bool = True) -> AsyncIterator[str | Usage]:
        if count:
            self._counts["generations"] += 1
        async with aclosing(self.backend.stream(request)) as pieces:
            async for piece in pieces:
                yield piece

    def _deadline(self, request: GenerationRequest) -> float | None:
        left = request.queue_left()  # a deadline counts from the request's arrival
        return None if left is None else self._clock.now() + left

    def _remaining(self, step: _Step) -> GenerationRequest:
        """The request a step queues again with: its own deadline counts from when it came."""
        if step.deadline is None:
            return step.request
        left = max(step.deadline - self._clock.now(), 0.0)
        return msgspec.structs.replace(step.request, queue_seconds=left)

    # --- leading a batch -----------------------------------------------------------------------

    async def _lead(self, line: _Line, step: _Step) -> AsyncIterator[str | Usage]:
        """Queue the step at the backend on its own ticket; if that ticket is admitted first,
        take the steps then waiting and lead their batch (alone, the step's own pieces are
        yielded; in a batch, every member's outcome, this step's too, is settled); if a batch
        another step leads takes it first, wait for that batch's outcome."""
        batch: list[_Step] = []
        sent: list[GenerationRequest] = []
        queued_at: list[float] = []  # when it queued at the backend (after any linger)

        def build() -> GenerationRequest:
            self._waited(priority, self._clock.now() - queued_at[0])
            del line.waiting[step]
            batch.extend(self._take(line, step))
            self._counts["generations"] += 1
            if len(batch) == 1:
                return step.request
            self._counts["batches"] += 1
            self._counts["batched_items"] += len(batch)
            sent.append(batch_request([s.request for s in batch], capabilities=self.backend.capabilities))
            return sent[0]

        pieces: list[str] = []
        usage: Usage | None = None
        line.waiting[step] = None
        priority = step.request.priority
        try:
            linger = self.settings.linger_for(priority, queueing=self._queueing(priority))
            if linger > 0:
                self._counts["lingered"] += 1
                with anyio.CancelScope() as step.lingering:
                    await self._clock.sleep_until(self._clock.now() + linger)
                step.lingering = None
            if not step.taken:
                queued_at.append(self._clock.now())
                async with aclosing(self._admitted(step.request, build, step.seat)) as stream:
                    async for piece in stream:
                        if not sent:
                            yield piece
                        elif isinstance(piece, Usage):
                            usage = piece
                        else:
                            pieces.append(piece)
        except SeatTaken:
            self._waited(priority, math.inf)  # it queued until a batch another step leads took it
        except BaseException as exc:
            line.waiting.pop(step, None)
            if not batch and isinstance(exc, AgentError) and exc.code == ErrorCode.RATE_LIMITED:
                self._waited(priority, math.inf)  # its deadline passed in the queue
            if not sent or not self._batch_failed(batch, exc):
                raise
            return
        if step.taken:
            try:
                await step.wake.wait()
            except BaseException:
                step.gone = True
                raise
        elif sent:
            self._split(batch, sent[0], "".join(pieces), usage)

    def _queueing(self, priority: str) -> bool:
        pressure = self._pressure.get(priority)
        return pressure is not None and pressure.queueing(self._clock.now())

    def _waited(self, priority: str, seconds: float) -> None:
        """A step of ``priority`` left the backend's queue after ``seconds`` (the adaptive
        linger's evidence of whether quota is short)."""
        if self.settings.adaptive:
            pressure = self._pressure.get(priority)
            if pressure is None:
                pressure = self._pressure[priority] = self.settings.pressure()
            pressure.record(self._clock.now(), queued=self.settings.queued(seconds))

    def _admitted(self, request: GenerationRequest, build: _Build, seat: Seat) -> AsyncIterator[str | Usage]:
        backend = self.backend
        if isinstance(backend, DefersRequest):
            return backend.stream_when_admitted(request, build, seat)
        return self._built(build)

    async def _built(self, build: _Build) -> AsyncIterator[str | Usage]:
        """A backend that admits at once: the batch is what is waiting now."""
        async with aclosing(self.backend.stream(build())) as pieces:
            async for piece in pieces:
                yield piece

    def _take(self, line: _Line, leader: _Step) -> list[_Step]:
        """The leader and the waiting steps its generation takes, each out of its own queue: on a
        fair-queuing backend the least served owners first, then the earliest deadline (then the
        longest waiting), as the backend would admit them; else the longest waiting."""
        room = self.settings.max_items - 1
        waiting = [s for s in line.waiting if s.lingering is not None or s.seat.queued]
        backend = self.backend
        if isinstance(backend, DefersRequest) and len(waiting) > room:
            # sorted is stable: the longest waiting first among owners served alike.
            waiting = sorted(waiting, key=lambda s: (
                math.floor(backend.service(s.request.owner or "anonymous")),
                math.inf if s.deadline is None else s.deadline))
        candidates = [leader]
        for step in waiting:
            if len(candidates) > room:
                break
            if not any(apart(step.request.item, chosen.request.item) for chosen in candidates):
                candidates.append(step)
        count = pack([s.request for s in candidates], backend.capabilities, self.settings.max_items)
        batch = candidates[:count]
        for member in batch[1:]:
            del line.waiting[member]
            member.taken = True
            if member.lingering is not None:
                member.lingering.cancel()
            else:
                taken = member.seat.take()
                assert taken, "a queued seat is taken at once"
        return batch

    def _split(self, batch: list[_Step], sent: GenerationRequest, text: str, usage: Usage | None) -> None:
        requests = [s.request for s in batch]
        output_tokens = usage.output_tokens if usage is not None else estimate_tokens(text)
        limit = min(sent.max_output_tokens or 0, self.backend.capabilities.max_output_tokens)
        # Backends count tokens their own way: an answer this close to its limit may be cut.
        results = read_batch(text, requests, truncated=output_tokens >= limit - _CUT_MARGIN_TOKENS)
        input_tokens = usage.input_tokens if usage is not None else estimate_tokens(sent.system + sent.prompt)
        share = -(-input_tokens // len(batch))
        for member, result in zip(batch, results, strict=True):
            if isinstance(result, Answer):
                self._counts["answered"] += 1
                self._counts["served"] += 1
                member.settle(_Answered(result.text, Usage(share, 0, estimate_tokens(result.text))))
            else:
                self._counts[result.why.value] += 1
                member.settle(_ALONE)

    def _batch_failed(self, batch: list[_Step], exc: BaseException) -> bool:
        """Settle a failed batch's members; True when the leader, too, runs alone instead of
        raising ``exc``."""
        leader, followers = batch[0], [s for s in batch[1:] if not s.gone]
        if not isinstance(exc, Exception):
            # The leader's caller left mid-batch (cancelled): the others queue again.
            for member in followers:
                member.settle(_REQUEUE)
            return False
        shared = isinstance(exc, AgentError) and exc.code in _SHARED_FAILURES
        for member in followers:
            member.settle(_Failed(exc) if shared and isinstance(exc, AgentError) else _ALONE)
        if isinstance(exc, AgentError) and not shared:
            leader.outcome = _ALONE
            return True
        if shared:
            self._counts["failed"] += 1  # the leader raises it as it is
        return False  # a shared failure, or a bug

    def __repr__(self) -> str:
        return f"CoalescingModel({self.backend!r}, max_items={self.settings.max_items})"


@asynccontextmanager
async def open_coalesced(
    opener: Callable[[], AbstractAsyncContextManager[LanguageModel]], settings: CoalesceSettings
) -> AsyncIterator[CoalescingModel]:
    """The backend ``opener`` runs, coalesced, while the block runs: a picklable factory (as a
    ``functools.partial``) for a model actor to build in its own process."""
    async with opener() as backend:
        yield CoalescingModel(backend, settings)
