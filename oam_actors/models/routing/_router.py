"""``RouterModel``: one :class:`~oam_actors.agent.LanguageModel` over the backends of a
:class:`~oam_actors.models.routing.RouteTable`.

Contract
--------
- A step goes down its row (:meth:`RouteTable.row` of its priority and kind). A tier that is not
  the row's last holds it at most :func:`spill_seconds` of its queue time: a tier that can say
  (:class:`~oam_actors.models.SupportsAdmissionWait`) that its quota cannot admit the step by
  then is passed at once; otherwise the step is sent with that ``queue_seconds``, so the tier's
  own scheduler admits it by then or refuses it (``rate_limited``) when the time is up, and the
  router moves on. A step is never kept on a tier past its spill deadline.
- A backend that fails before any text (``model_unavailable``, ``generation_failed``, ``busy``)
  is skipped for its ``cooldown``; one that cannot take the step for its size or language
  (``context_size_exceeded``, ``unsupported_language``) is passed over without one. Text already
  streamed is never taken back: a failure after it reaches the caller.
- A priced backend's step reserves its worst-case cost (its input, and the request's
  ``max_output_tokens`` or the backend's) on the backend's and the tenant's caps before it is
  sent; a cap without room passes the step to the next tier. The hold is settled at the cost of
  the backend's reported :class:`~oam_actors.agent.Usage` (or the text's estimate) when the
  step ends, and dropped when nothing was spent.
- A step no tier took fails with the last tier's error, or ``rate_limited`` (the game layer
  degrades it to its fallback as it does today).
- A turn on a backend with native tool calling stays there: its later steps (``follow_up``)
  go to the backend its first step used. Envelope-loop steps are independent and may move.
- :meth:`statistics` reports :class:`RouterStatistics`: served, spilled, capped, failed and
  skipped steps, spend per backend, tenant and request kind, and each backend's own record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from typing import Any

import msgspec

from ...agent.model import (
    Availability,
    GenerationRequest,
    LanguageModel,
    ModelCapabilities,
    Usage,
    estimate_tokens,
    estimate_tokens_of_length,
)
from ...clock import Clock, MonotonicClock
from ...errors import AgentError, DeadlinePassed, ErrorCode
from .._statistics import SupportsAdmissionWait, SupportsStatistics
from ._policy import Cooldowns, SpendLedger, spill_seconds
from ._table import PRIORITIES, WINDOWS, BackendRoute, RouteTable

__all__ = ["BackendUse", "RouterModel", "RouterStatistics", "StepUse", "TenantUse"]

_DEFAULT_QUEUE_SECONDS = {"dialogue": 20.0, "decision": 60.0, "background": 120.0}
_FAILURES = {ErrorCode.MODEL_UNAVAILABLE, ErrorCode.GENERATION_FAILED, ErrorCode.BUSY}
_PASS_OVER = {ErrorCode.RATE_LIMITED, ErrorCode.CONTEXT_SIZE_EXCEEDED, ErrorCode.UNSUPPORTED_LANGUAGE}
_MAX_PINS = 100_000


class BackendUse(msgspec.Struct, frozen=True, rename="camel"):
    """One backend as the router used it. ``spilled``: steps it did not admit by their spill
    deadline; ``capped``: steps a cap kept from it; ``skipped``: steps that passed it while it
    cooled down; spend in the last hour and day beside the caps, and what steps in flight hold."""

    name: str
    model: str
    served: int
    spilled: int
    capped: int
    failed: int
    skipped: int
    cooling_seconds: float
    spend: float
    spend_hour: float
    spend_day: float
    reserved: float
    cap_hour: float | None
    cap_day: float | None
    statistics: Any = None


class TenantUse(msgspec.Struct, frozen=True, rename="camel"):
    """One tenant's served steps and spend, beside its caps."""

    name: str
    served: int
    spend: float
    spend_hour: float
    spend_day: float
    cap_hour: float | None
    cap_day: float | None


class StepUse(msgspec.Struct, frozen=True, rename="camel"):
    """Steps of one priority and kind a backend served, and what they cost."""

    backend: str
    priority: str
    kind: str
    served: int
    spend: float


class RouterStatistics(msgspec.Struct, frozen=True, rename="camel"):
    """The ``model/status`` statistics of a routed system model."""

    routing: bool
    spill: float
    unrouted: int
    backends: list[BackendUse]
    tenants: list[TenantUse]
    steps: list[StepUse]


class _Counts:
    __slots__ = ("capped", "failed", "served", "skipped", "spilled")

    def __init__(self) -> None:
        self.served = self.spilled = self.capped = self.failed = self.skipped = 0


class _Run:
    """What one attempt on a backend streamed, for its cost."""

    __slots__ = ("characters", "streamed", "usage")

    def __init__(self) -> None:
        self.streamed = False
        self.characters = 0
        self.usage: Usage | None = None

    def saw(self, piece: str | Usage) -> None:
        if isinstance(piece, Usage):
            self.usage = piece
        elif piece:
            self.streamed = True
            self.characters += len(piece)


class RouterModel:
    """The backends of ``table`` as one model; ``backends`` gives each backend's model by name
    (called per step, so a backend that starts later is found)."""

    def __init__(self, table: RouteTable, backends: Mapping[str, Callable[[], LanguageModel]], *,
                 clock: Clock | None = None, queue_seconds: tuple[float, float, float] | None = None) -> None:
        missing = set(table.backends) - set(backends)
        if missing:
            raise ValueError(f"no model for the backends {sorted(missing)}")
        self._table = table
        self._backends = dict(backends)
        self._clock: Clock = clock or MonotonicClock()
        self._queue_seconds = dict(zip(PRIORITIES, queue_seconds)) if queue_seconds else dict(_DEFAULT_QUEUE_SECONDS)
        self._cooldowns = Cooldowns()
        caps: dict[str, list[tuple[float, float]]] = {f"backend:{n}": b.cap.items() for n, b in table.backends.items()}
        caps.update({f"tenant:{t.name}": t.cap.items() for t in table.tenants})
        self._ledger = SpendLedger(caps)
        self._counts = {name: _Counts() for name in table.backends}
        self._tenant_served: dict[str, int] = {}
        self._steps: dict[tuple[str, str, str], list[float]] = {}  # (backend, priority, kind) -> [served, spend]
        self._pins: dict[str, str] = {}
        self._unrouted = 0
        self._capabilities: ModelCapabilities | None = None

    @property
    def table(self) -> RouteTable:
        return self._table

    @property
    def capabilities(self) -> ModelCapabilities:
        """What every backend can do: the smallest context and output, native tool calling and
        coalescing where any backend has them (each backend reads only what it uses)."""
        if self._capabilities is None:
            every = [self._backends[name]().capabilities for name in self._table.backends]
            self._capabilities = ModelCapabilities(
                context_size=min(c.context_size for c in every),
                max_output_tokens=min(c.max_output_tokens for c in every),
                native_tool_calling=any(c.native_tool_calling for c in every),
                system_instructions=all(c.system_instructions for c in every),
                coalesces=any(c.coalesces for c in every),
            )
        return self._capabilities

    async def availability(self) -> Availability:
        """The first available backend's (dialogue row first), else the dialogue row's first."""
        order = [*self._table.rows["dialogue"], *(n for n in self._table.backends if n not in self._table.rows["dialogue"])]
        first: Availability | None = None
        for name in order:
            found = await self._backends[name]().availability()
            if found.available:
                return found
            first = first or found
        assert first is not None
        return first

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        priority = request.priority if request.priority in PRIORITIES else "dialogue"
        row = self._row(request, priority)
        tenant = self._table.tenant_of(request.owner)
        deadline = self._clock.now() + _queue_limit(self._queue_seconds[priority], request)
        last_error: AgentError | None = None
        for index, name in enumerate(row):
            now = self._clock.now()
            counts = self._counts[name]
            if self._cooldowns.cooling(name, now):
                counts.skipped += 1
                continue
            left = deadline - now
            if left <= 0:
                break
            route = self._table.backends[name]
            model = self._backends[name]()
            # The last tier that may still take the step (one cooling down will not) gets all its time.
            last = not any(not self._cooldowns.cooling(later, now) for later in row[index + 1:])
            queue = spill_seconds(left, self._table.spill, last=last)
            if not last and isinstance(model, SupportsAdmissionWait) and model.admission_wait(request) > queue:
                counts.spilled += 1  # its quota cannot admit the step by the spill deadline: do not wait for it
                continue
            sent, hold = self._reserve(route, model, request, tenant.name if tenant else None, now)
            if sent is None:
                counts.capped += 1
                last_error = DeadlinePassed(f"The spend cap of backend {name!r} or of the tenant has no room "
                                            "for the step.", retry_after=60.0)
                continue
            if sent.queue_seconds is not None:
                queue = min(queue, sent.queue_seconds)
            run = _Run()
            finished = failed = False
            try:
                async with aclosing(model.stream(msgspec.structs.replace(sent, queue_seconds=queue))) as pieces:
                    async for piece in pieces:
                        run.saw(piece)
                        yield piece
                finished = True
            except AgentError as error:
                if run.streamed or error.code not in _FAILURES | _PASS_OVER:
                    counts.failed += 1
                    failed = True
                    raise
                last_error = error
                if error.code is ErrorCode.RATE_LIMITED:
                    counts.spilled += not last  # the last tier passes the step to nobody
                elif error.code in _FAILURES:
                    counts.failed += 1
                    self._cooldowns.cool(name, self._clock.now(), route.cooldown)
                continue
            finally:
                cost = self._settle(hold, route, request, run)
                if finished or (run.streamed and not failed):
                    self._served(name, request, priority, tenant.name if tenant else "", cost, model)
            return
        self._unrouted += 1
        raise last_error or DeadlinePassed(f"No backend of the {priority} row could take the step in time "
                                           f"({', '.join(row)}).", retry_after=1.0)

    async def statistics(self) -> RouterStatistics:
        """:meth:`statistics_nowait`, with each backend's own record (``statistics``)."""
        stats = self.statistics_nowait()
        backends = []
        for use in stats.backends:
            model = self._backends[use.name]()
            record = await model.statistics() if isinstance(model, SupportsStatistics) else None
            backends.append(msgspec.structs.replace(
                use, statistics=None if record is None else msgspec.to_builtins(record)))
        return msgspec.structs.replace(stats, backends=backends)

    def statistics_nowait(self) -> RouterStatistics:
        """The router's own counters and spend now (no backend records: those may be remote)."""
        now, ledger = self._clock.now(), self._ledger
        backends = []
        for name, route in self._table.backends.items():
            key, counts = f"backend:{name}", self._counts[name]
            backends.append(BackendUse(
                name=name, model=route.model or "devices", served=counts.served, spilled=counts.spilled, capped=counts.capped, failed=counts.failed,
                skipped=counts.skipped, cooling_seconds=self._cooldowns.left(name, now),
                spend=ledger.spent(key, now), spend_hour=ledger.spent(key, now, WINDOWS["hour"]),
                spend_day=ledger.spent(key, now, WINDOWS["day"]), reserved=ledger.reserved(key),
                cap_hour=route.cap.hour, cap_day=route.cap.day,
            ))
        tenants = []
        for tenant in self._table.tenants:
            key = f"tenant:{tenant.name}"
            tenants.append(TenantUse(
                name=tenant.name, served=self._tenant_served.get(tenant.name, 0), spend=ledger.spent(key, now),
                spend_hour=ledger.spent(key, now, WINDOWS["hour"]), spend_day=ledger.spent(key, now, WINDOWS["day"]),
                cap_hour=tenant.cap.hour, cap_day=tenant.cap.day,
            ))
        steps = [StepUse(backend=b, priority=p, kind=k, served=int(v[0]), spend=v[1])
                 for (b, p, k), v in sorted(self._steps.items())]
        return RouterStatistics(routing=True, spill=self._table.spill, unrouted=self._unrouted, backends=backends,
                                tenants=tenants, steps=steps)

    # --- one step --------------------------------------------------------------------------------

    def _row(self, request: GenerationRequest, priority: str) -> tuple[str, ...]:
        """The step's row; a later step of a turn on a native tool-calling backend stays there."""
        owner = request.owner or ""
        if request.follow_up and owner in self._pins:
            return (self._pins[owner],)
        return self._table.row(priority, request.kind.value)

    def _reserve(self, route: BackendRoute, model: LanguageModel, request: GenerationRequest, tenant: str | None,
                 now: float) -> tuple[GenerationRequest | None, int | None]:
        """The request to send, with the hold of its worst-case cost (``None``: a free backend
        needs none); ``(None, None)`` when a cap has no room. A priced step without its own
        ``max_output_tokens`` is sent with the backend's ``reserve_output_tokens``, the bound
        its hold covers."""
        if route.price.free:
            return request, None
        output = request.max_output_tokens or min(route.reserve_output_tokens, model.capabilities.max_output_tokens)
        worst = route.price.cost(_input_tokens(request), output)
        keys = [f"backend:{route.name}", *([f"tenant:{tenant}"] if tenant is not None else [])]
        hold = self._ledger.reserve(keys, worst, now)
        if hold is None:
            return None, None
        return msgspec.structs.replace(request, max_output_tokens=output), hold

    def _settle(self, hold: int | None, route: BackendRoute, request: GenerationRequest, run: _Run) -> float:
        if hold is None:
            return 0.0
        cost = 0.0
        if run.streamed or run.usage is not None:
            usage = run.usage
            if usage is None or (usage.input_tokens == 0 and usage.output_tokens == 0):
                cost = route.price.cost(_input_tokens(request), estimate_tokens_of_length(run.characters))
            else:
                cost = route.price.cost(usage.input_tokens, usage.output_tokens)
        self._ledger.settle(hold, cost, self._clock.now())
        return cost

    def _served(self, name: str, request: GenerationRequest, priority: str, tenant: str, cost: float,
                model: LanguageModel) -> None:
        self._counts[name].served += 1
        self._tenant_served[tenant] = self._tenant_served.get(tenant, 0) + 1
        tally = self._steps.setdefault((name, priority, request.kind.value), [0, 0.0])
        tally[0] += 1
        tally[1] += cost
        owner = request.owner or ""
        self._pins.pop(owner, None)
        if model.capabilities.native_tool_calling:
            self._pins[owner] = name
            if len(self._pins) > _MAX_PINS:
                del self._pins[next(iter(self._pins))]

    def __repr__(self) -> str:
        return f"RouterModel({self._table.source}: {', '.join(self._table.backends)})"


def _input_tokens(request: GenerationRequest) -> int:
    return estimate_tokens(request.system) + estimate_tokens(request.prompt)


def _queue_limit(configured: float, request: GenerationRequest) -> float:
    """The step's queue time from now, as a pool counts it (``queue_limit`` of the pool)."""
    limit = configured if request.follow_up else configured - request.waited()
    own = request.queue_left()
    return max(0.0, limit if own is None else min(limit, own))
