"""``DevicePool``: one :class:`~oam_actors.agent.LanguageModel` over N Nano phones (the contract
is in the package docstring). Pure decisions live beside it: fault classes and device health in
:mod:`._health`, the choice of a device in :mod:`._select`, status records in :mod:`._status`."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, aclosing, contextmanager
from types import TracebackType
from typing import NoReturn, Self

import anyio
import anyio.abc
import httpx

from ...agent.model import Availability, GenerationRequest, ModelCapabilities, Usage, estimate_tokens
from ...errors import AgentError, DeadlinePassed, ErrorCode, seconds_text
from ..address_guard import AddressGuard
from ..device import DeviceError, DeviceModel, MlKitCode
from ..device.protocol import availability_from_status
from ..scheduler import Admission, Clock, DialogueReserve, Headroom, Ledger, MonotonicClock, Priority, QuotaScheduler, Seat
from ._config import PoolConfig, PoolConfigError, normalize_urls, priority_of, queue_limit, spent_before_the_model
from ._health import DeviceState, Fault, Health, cause_of, classify
from ._select import Candidate, choose
from ._status import DeviceStatistics, PoolStatistics, WaitSamples, pool_availability, summarize_waits

__all__ = ["DevicePool"]

_log = logging.getLogger(__name__)
_WAIT_SAMPLES = 20_000  # queue waits kept per priority for the percentiles
_MAX_HOMES = 100_000  # owners whose home device the pool remembers


class _Device:
    """The pool's bookkeeping for one phone."""

    def __init__(self, index: int, name: str, model: DeviceModel, scheduler: QuotaScheduler,
                 health: Health) -> None:
        self.index = index
        self.name = name
        self.model = model
        self.scheduler = scheduler
        self.health = health
        self.availability: Availability | None = None
        self.waiting: set[anyio.CancelScope] = set()  # steps queued here, to move if it fails
        self.in_flight = 0
        self.busy_seconds = 0.0
        self.ok = self.busy = self.errors = self.rejected = 0

    def evict(self) -> None:
        """Send every step queued here back to choose another device."""
        for scope in self.waiting:
            scope.cancel()


class _Step:
    """One model step on its way through the pool (across reroutes)."""

    def __init__(self, request: GenerationRequest, priority: Priority, started: float, deadline: float,
                 build: Callable[[], GenerationRequest] | None = None, seat: Seat | None = None) -> None:
        self.request = request
        self.build = build  # makes the request to run, once, at the first admission
        self.seat = seat  # its place in whichever device's queue it waits in
        self.priority = priority
        self.owner = request.owner or "anonymous"
        self.tokens = estimate_tokens(request.system) + estimate_tokens(request.prompt)
        self.started = started
        self.deadline = deadline
        self.tried: set[int] = set()
        self.failures = 0  # failures other than quota refusals
        self.last_error: DeviceError | None = None

    def admitted(self) -> GenerationRequest:
        """The request to run now that a device admitted the step (built at the first admission;
        a reroute runs the same one)."""
        if self.build is not None:
            self.request, self.build = self.build(), None
        return self.request


class _Attempt:
    """One try of a step on one device."""

    def __init__(self, device: _Device) -> None:
        self.device = device
        self.admission: Admission | None = None
        self.streamed = False  # text reached the agent: the step can no longer move
        self.done = False  # served (or closed early by the agent): nothing left to try

    def saw(self, piece: str | Usage) -> None:
        if isinstance(piece, Usage):
            assert self.admission is not None
            self.admission.tokens_used = piece.input_tokens + piece.output_tokens
        elif piece:
            self.streamed = True


class DevicePool:
    """A pool of phones shared by every session and NPC of a process; see the package docstring."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        config: PoolConfig | None = None,
        names: Sequence[str] | None = None,
        clock: Clock | None = None,
        guard: AddressGuard | None = None,
    ) -> None:
        self._config = config = config or PoolConfig()
        urls = normalize_urls(urls)
        names = list(names) if names is not None else [f"device{n + 1}" for n in range(len(urls))]
        if len(names) != len(urls) or len(set(names)) != len(names):
            raise PoolConfigError("device names must be unique, one per URL")
        self._clock: Clock = clock or MonotonicClock()
        timeout = config.timeouts.to_httpx()
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        # A guard (a server beyond loopback, phones a session named) pins connections to checked addresses.
        transport = guard.transport(limits=limits, trust_env=False) if guard is not None else None
        self._client = httpx.AsyncClient(timeout=timeout, trust_env=False, limits=limits, transport=transport)
        self._ledger = ledger = Ledger()  # one fairness ledger: an NPC served on one phone waits its turn on all
        # One dialogue demand: every phone keeps headroom for its share of the lines the pool sees,
        # not for those it happened to get (which would draw ever more to the phones keeping most).
        reserve = DialogueReserve(Headroom(), config.limits.window_seconds)
        self._devices = [
            _Device(n, name, DeviceModel(url, token=config.token, timeouts=config.timeouts, client=self._client),
                    QuotaScheduler(config.limits, clock=self._clock, ledger=ledger, reserve=reserve),
                    Health(config.dead_after_failures))
            for n, (url, name) in enumerate(zip(urls, names, strict=True))
        ]
        self._started = self._clock.now()
        self._turn = 0
        self._homes: dict[str, int] = {}  # owner → the device its last step went to
        self._waits = {p: WaitSamples(_WAIT_SAMPLES) for p in Priority}
        self._generating = dict.fromkeys(Priority, 0.0)  # phone seconds spent generating, by priority
        self._steps_ok = self._steps_failed = self._rerouted = 0
        self._absorbed = self._surfaced = 0
        self._tasks: anyio.abc.TaskGroup | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        """Probe every device once (problems are logged and shown by ``availability``), then keep
        probing in the background every ``probe_interval_seconds``."""
        self._started = self._clock.now()
        await self.probe()
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._probe_forever)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._tasks is not None:
                self._tasks.cancel_scope.cancel()
                await self._tasks.__aexit__(None, None, None)
        finally:
            self._tasks = None
            await self._client.aclose()

    async def _probe_forever(self) -> None:
        while True:
            await self._clock.sleep_until(self._clock.now() + self._config.probe_interval_seconds)
            await self.probe()

    async def probe(self) -> None:
        """Ask every device for its status now: dead or backgrounded devices that answer
        available and in the foreground are back; devices that do not answer are dead."""
        async with anyio.create_task_group() as group:
            for device in self._devices:
                group.start_soon(self._probe_one, device)

    async def _probe_one(self, device: _Device) -> None:
        with anyio.move_on_after(self._config.probe_timeout_seconds):
            try:
                status = await device.model.status()
            except DeviceError as error:
                self._kill(device, f"status check failed: {error.message}")
                return
            device.availability = availability_from_status(status)
            if not device.availability.available:
                self._kill(device, f"model {status.status.value}: {device.availability.reason}")
            elif not status.foreground:
                self._cool(device, self._config.background_cooldown_seconds, "app in the background",
                           background=True)
            elif device.health.needs_probe:
                device.health.revive()
                _log.info("device pool: %s (%s) is serving again", device.name, device.model.base_url)
            return
        self._kill(device, f"status check got no answer within {seconds_text(self._config.probe_timeout_seconds)}")

    # --- the LanguageModel interface -------------------------------------------------------------

    @property
    def capabilities(self) -> ModelCapabilities:
        """The smallest context and output limits among the devices (a step must fit on any)."""
        known = [d.model.capabilities for d in self._devices]
        return ModelCapabilities(context_size=min(c.context_size for c in known),
                                 max_output_tokens=min(c.max_output_tokens for c in known))

    async def availability(self) -> Availability:
        """The pool's ``model/availability`` from the last probes (no I/O)."""
        now = self._clock.now()
        return pool_availability([(d.health.state(now), d.availability) for d in self._devices])

    def admission_wait(self, request: GenerationRequest) -> float:
        """The shortest wait for quota on a device that is not dead: its cool-down or its
        scheduler's :meth:`~oam_actors.models.scheduler.QuotaScheduler.admission_wait`
        (``math.inf`` when every device is dead; :class:`~oam_actors.models.SupportsAdmissionWait`)."""
        now = self._clock.now()
        tokens = estimate_tokens(request.system) + estimate_tokens(request.prompt)
        return min((max(device.health.cool_until - now, device.scheduler.admission_wait(tokens))
                    for device in self._devices if device.health.state(now) is not DeviceState.DEAD), default=math.inf)

    def service(self, owner: str) -> float:
        """``owner``'s place in the pool's fair queuing (lower: less served), the seam
        :class:`~oam_actors.models.coalesce.DefersRequest`."""
        return self._ledger.start_tag(owner)

    def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        """One step on the best device; refusals and failures before any text move it to another.

        Raises :class:`~oam_actors.errors.AgentError`: ``rate_limited`` (with ``retryAfter``)
        once the step's queue time is used up, ``model_unavailable`` when every device is dead,
        the device's own error when the request itself is refused or text had already streamed.
        """
        return self._stream(request, None, None)

    def stream_when_admitted(
        self, request: GenerationRequest, build: Callable[[], GenerationRequest], seat: Seat
    ) -> AsyncIterator[str | Usage]:
        """:meth:`stream`, queued as ``request`` at ``seat``, running what ``build()`` returns
        when a device admits it (the seam :class:`~oam_actors.models.coalesce.DefersRequest`).
        Raises :class:`~oam_actors.models.scheduler.SeatTaken` when the seat was taken."""
        return self._stream(request, build, seat)

    async def _stream(
        self, request: GenerationRequest, build: Callable[[], GenerationRequest] | None, seat: Seat | None
    ) -> AsyncIterator[str | Usage]:
        now = self._clock.now()
        priority = priority_of(request.priority)
        seconds = self._queue_seconds(request, priority)
        if seconds <= 0:
            raise spent_before_the_model()
        step = _Step(request, priority, now, now + seconds, build, seat)
        while True:
            attempt = _Attempt(self._choose(step))
            async with aclosing(self._attempt(step, attempt)) as pieces:
                async for piece in pieces:
                    yield piece
            if attempt.done:
                return

    # --- one step --------------------------------------------------------------------------------

    async def _attempt(self, step: _Step, attempt: _Attempt) -> AsyncIterator[str | Usage]:
        """Queue ``step`` on the attempt's device, then stream it there. Returns with
        ``attempt.done`` unset when the step must choose again: the device failed while the step
        waited, or failed before any text (:meth:`_failed` raises when the step may not retry)."""
        device = attempt.device
        async with AsyncExitStack() as stack:
            attempt.admission = await self._queue(stack, device, step)
            if attempt.admission is None:
                return  # the device failed while the step waited: choose again
            self._waits[step.priority].append(self._clock.now() - step.started)
            # Closed explicitly when the agent stops reading, so the phone cancels at once.
            pieces = await stack.enter_async_context(aclosing(device.model.stream(step.admitted())))
            with self._busy(device, step.priority):
                try:
                    async for piece in pieces:
                        attempt.saw(piece)
                        yield piece
                except DeviceError as error:
                    self._failed(device, step, error, attempt.streamed)
                    return
                except GeneratorExit:
                    self._served(device)  # the agent had what it needed (a complete decision)
                    raise
            self._served(device)
            attempt.done = True

    @contextmanager
    def _busy(self, device: _Device, priority: Priority) -> Iterator[None]:
        """Count a generation in flight on ``device`` and the time it kept the device busy, on
        the device's and on its priority's account."""
        started = self._clock.now()
        device.in_flight += 1
        try:
            yield
        finally:
            device.in_flight -= 1
            seconds = self._clock.now() - started
            device.busy_seconds += seconds
            self._generating[priority] += seconds

    def _choose(self, step: _Step) -> _Device:
        now = self._clock.now()
        candidates = []
        for device in self._devices:
            stats = device.scheduler.statistics()
            limit = stats.requests_limit
            dialogue = step.priority is Priority.DIALOGUE
            # Slots kept for dialogue are no room for other work.
            room = None if limit is None else max(0, limit - stats.requests_in_window - (
                0 if dialogue else stats.dialogue_reserve))
            # What would start before this step there: its class and the classes above it.
            load = sum(stats.queued[: step.priority + 1]) + stats.running
            candidates.append(Candidate(
                index=device.index,
                state=device.health.state(now),
                cool_until=device.health.cool_until,
                load=load,
                room=room,
                tried=device.index in step.tried,
                # With every window full, a player's line waits least where one frees first,
                # after a free for each step ahead of it (at the window's rate).
                frees_in=device.scheduler.admission_wait(step.tokens) + load * self._config.limits.window_seconds / limit
                if dialogue and room == 0 and limit else 0.0,
            ))
        index = choose(candidates, self._turn, self._homes.get(step.owner))
        self._turn += 1
        if index is None:
            self._steps_failed += 1
            reasons = "; ".join(f"{d.name}: {d.health.view(now).reason}" for d in self._devices)
            raise AgentError(ErrorCode.MODEL_UNAVAILABLE, f"No device of the pool can serve ({reasons}).")
        self._remember_home(step.owner, index)
        return self._devices[index]

    def _remember_home(self, owner: str, index: int) -> None:
        homes = self._homes
        homes.pop(owner, None)  # re-inserted last: the table forgets the owners idle longest
        homes[owner] = index
        if len(homes) > _MAX_HOMES:
            del homes[next(iter(homes))]

    async def _queue(self, stack: AsyncExitStack, device: _Device, step: _Step) -> Admission | None:
        """Wait for the device's scheduler to admit the step; ``None`` when the device failed
        (or cooled down) meanwhile and evicted it."""
        remaining = step.deadline - self._clock.now()
        if remaining <= 0:
            self._give_up(step, self._out_of_time(step))
        with anyio.CancelScope() as scope:
            device.waiting.add(scope)
            try:
                return await stack.enter_async_context(device.scheduler.admit(
                    step.owner, step.priority, tokens=step.tokens, deadline_seconds=remaining, seat=step.seat,
                    follow_up=step.request.follow_up))
            except AgentError as error:
                self._give_up(step, error)
            finally:
                device.waiting.discard(scope)
        return None

    def _served(self, device: _Device) -> None:
        device.ok += 1
        device.health.succeeded()
        self._steps_ok += 1

    def _failed(self, device: _Device, step: _Step, error: DeviceError, streamed: bool) -> None:
        """Book a failed attempt; returns when the step may try again, raises otherwise."""
        fault = classify(error)
        self._book(device, fault, error)
        step.last_error = error
        now = self._clock.now()
        if streamed or fault is Fault.REQUEST:
            self._give_up(step, error)  # text already reached the agent, or no phone would do better
        if fault is Fault.QUOTA:
            if now >= step.deadline:
                self._give_up(step, self._out_of_time(step))
            self._absorbed += 1
        else:
            step.failures += 1
            if step.failures >= self._config.max_attempts or now >= step.deadline:
                self._give_up(step, error)
        step.tried.add(device.index)
        self._rerouted += 1

    def _give_up(self, step: _Step, error: AgentError) -> NoReturn:
        self._steps_failed += 1
        if error.code is ErrorCode.RATE_LIMITED:
            self._surfaced += 1
        raise error

    def _out_of_time(self, step: _Step) -> DeadlinePassed:
        """The step's queue time is spent: the last quota refusal said why, if there was one."""
        last = step.last_error
        if last is not None:
            return DeadlinePassed(last.message, retry_after=last.retry_after)
        seconds = self._queue_seconds(step.request, step.priority)
        return DeadlinePassed(f"No device had room for the step within {seconds_text(seconds)}.",
                              retry_after=self._config.limits.min_interval_seconds)

    def _queue_seconds(self, request: GenerationRequest, priority: Priority) -> float:
        """The pool's queue time for the priority, or the request's own when that is shorter."""
        return queue_limit(self._config.queue_deadline(priority), request)

    # --- device health ---------------------------------------------------------------------------

    def _book(self, device: _Device, fault: Fault, error: DeviceError) -> None:
        cause = cause_of(error)
        match fault:
            case Fault.QUOTA:
                device.busy += 1
                self._throttled(device, error, cause)
            case Fault.REQUEST:
                device.rejected += 1
                device.health.succeeded()  # it answered properly
            case Fault.TRANSIENT:
                device.errors += 1
                device.health.transient_failure(self._clock.now(), self._config.transient_cooldown_seconds, cause)
                if device.health.state(self._clock.now()) is DeviceState.DEAD:
                    self._announce_death(device)
            case Fault.UNREACHABLE | Fault.UNAVAILABLE:
                device.errors += 1
                self._kill(device, f"{cause}: {error.message}")

    def _throttled(self, device: _Device, error: DeviceError, cause: str) -> None:
        limits = self._config.limits
        background = error.mlkit_code == MlKitCode.BACKGROUND_USE_BLOCKED
        seconds = error.retry_after
        if seconds is None:
            seconds = self._config.background_cooldown_seconds if background else limits.backoff_seconds
        seconds = max(seconds, limits.min_interval_seconds)  # a zero delay must not spin
        stats = device.scheduler.statistics()
        # BUSY means the phone's window is full: what ours holds besides this step is its limit,
        # unless the phone frees a slot within a pace or two (its window merely lags ours a
        # little). Other quotas say nothing about the rate; the limit stays as it is.
        rate = error.mlkit_code == MlKitCode.BUSY or (error.mlkit_code is None and error.http_status == 429)
        lag = seconds <= 2 * limits.min_interval_seconds
        observed = max(1, stats.requests_in_window - 1) if rate and not lag else stats.requests_limit
        device.scheduler.throttled(retry_after=seconds, observed_limit=observed)
        self._cool(device, seconds, cause, background=background)

    def _cool(self, device: _Device, seconds: float, reason: str, *, background: bool = False) -> None:
        device.health.cool_down(self._clock.now(), seconds, reason, background=background)
        device.evict()

    def _kill(self, device: _Device, reason: str) -> None:
        was_dead = device.health.state(self._clock.now()) is DeviceState.DEAD
        device.health.kill(reason)
        if not was_dead:
            self._announce_death(device)

    def _announce_death(self, device: _Device) -> None:
        _log.warning("device pool: %s (%s) is out of service: %s", device.name, device.model.base_url,
                     device.health.view(self._clock.now()).reason)
        device.evict()

    # --- status ----------------------------------------------------------------------------------

    async def statistics(self) -> PoolStatistics:
        """The pool's numbers (:meth:`statistics_nowait`), as every model reports them
        (:class:`~oam_actors.models.SupportsStatistics`)."""
        return self.statistics_nowait()

    def statistics_nowait(self) -> PoolStatistics:
        """Per device state, queue and counters; pool counters and queue waits by priority."""
        now = self._clock.now()
        elapsed = max(now - self._started, 1e-9)
        devices = tuple(self._device_statistics(d, now, elapsed) for d in self._devices)
        queues = [d.scheduler.statistics().queued for d in self._devices]  # each by Priority value
        states = [d.state for d in devices]
        return PoolStatistics(
            devices=devices,
            ready=states.count(DeviceState.READY),
            cooling=states.count(DeviceState.COOLING),
            dead=states.count(DeviceState.DEAD),
            queued=sum(d.queued for d in devices),
            in_flight=sum(d.in_flight for d in devices),
            steps_ok=self._steps_ok,
            steps_failed=self._steps_failed,
            rerouted=self._rerouted,
            quota_events_absorbed=self._absorbed,
            quota_events_surfaced=self._surfaced,
            queue_wait={p.name.lower(): summarize_waits(self._waits[p]) for p in Priority},
            elapsed_seconds=round(elapsed, 3),
            queued_by_priority={p.name.lower(): sum(q[p.value] for q in queues) for p in Priority},
            generating_by_priority={p.name.lower(): round(self._generating[p], 3) for p in Priority},
        )

    def _device_statistics(self, device: _Device, now: float, elapsed: float) -> DeviceStatistics:
        view = device.health.view(now)
        stats = device.scheduler.statistics()
        return DeviceStatistics(
            name=device.name,
            url=device.model.base_url,
            state=view.state,
            reason=view.reason,
            cooling_seconds=None if view.cooling_for is None else round(view.cooling_for, 3),
            queued=sum(stats.queued),
            in_flight=device.in_flight,
            ok=device.ok,
            busy=device.busy,
            errors=device.errors,
            rejected=device.rejected,
            utilisation=round(min(1.0, device.busy_seconds / elapsed), 4),
            requests_limit=stats.requests_limit,
            context_size=device.model.capabilities.context_size,
            requests_in_window=stats.requests_in_window,
        )

    def __repr__(self) -> str:
        return f"DevicePool({[d.model.base_url for d in self._devices]!r})"

