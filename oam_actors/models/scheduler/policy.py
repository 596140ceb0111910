"""Quota policy: which queued model request may start now, and when to look again.

Pure logic: no I/O, no clock, no asyncio. Every call that depends on time takes ``now`` (seconds
on one monotonic scale, e.g. ``time.monotonic()``); a ``now`` earlier than one already seen is
read as the latest one seen. One :class:`QuotaPolicy` guards one backend (a phone, an API key).

Contract
--------
- **Lifecycle.** A :class:`Ticket` is submitted once and ends exactly once: *admitted* (returned
  by :meth:`QuotaPolicy.poll`), *cancelled* (:meth:`QuotaPolicy.cancel` returned ``True``),
  *taken* (:meth:`QuotaPolicy.take` returned ``True``: another admission's generation answers it,
  an item of a coalesced batch; charged to its owner like an admission, but no slot of the
  window) or *expired* (still queued when its deadline passed; :meth:`~QuotaPolicy.poll` returns
  it with a ``retry_after`` estimate). An admitted ticket runs until :meth:`QuotaPolicy.release`.
- **Budgets.** Within any rolling window of ``window_seconds``, admissions never exceed the request
  limit (the configured one, or the lower learned one) and their token estimates never exceed
  ``tokens_per_window``; running tickets never exceed ``max_concurrency``; admissions are at least
  ``min_interval_seconds`` apart; nothing starts during a cool-down or while a rate-limit-header
  budget is spent. A ticket is never admitted after its deadline (the deadline itself counts).
- **Priority.** Dialogue is strict: while a dialogue ticket waits, nothing else starts, not even
  a smaller ticket that would fit (no priority inversion, no starvation by size). Decisions and
  background work share one fair queue in which, among owners served alike, the ticket that may wait least goes
  first (a decision before background work when they may wait alike), and an owner's own
  decision always before its own background work (:mod:`.ordering`).
- **Reserved headroom** (:mod:`.headroom`): a ticket below dialogue starts only while the rolling
  window keeps the slots reserved for the dialogue expected in it, and the free slots the
  dialogue expected before each of the window's next frees needs (less those that free within
  the pacing interval, which are lent); dialogue may use all of it. Policies may share one
  :class:`~.headroom.DialogueReserve` (a pool's phones): each then keeps its share of the
  dialogue all of them see.
- **Order** (:mod:`.ordering`): start-time fair queuing over owners on one ledger shared by all
  classes, with a bounded credit for idle owners; among owners within one request of service of
  each other the shortest queue budget first, then earliest deadline; follow-ups before every
  band; earliest deadline first within an owner, and among dialogue once a line's slack
  nears what the lines due before it need at the backend's expected admission interval (the
  pace, the window's rate, or the time an admission runs per slot of concurrency, whichever is
  longest). The cost of a ticket is its dominant
  share: one request, or its tokens counted in request equivalents
  (``tokens_per_window / requests_per_window``) when that is more. Fairness is over actions: a
  ``follow_up`` ticket (a later step of a turn: a tool round's next step, a repair) costs
  nothing, since the turn's first step was charged for the action, and an item a coalesced
  batch answers (:meth:`QuotaPolicy.take`) costs what its own admission would have.
- **Adaptation (AIMD with a remembered ceiling).** A throttle (ML Kit BUSY, HTTP 429) starts a
  cool-down of ``retry_after`` seconds, or an exponential backoff when the backend gave none, and
  multiplies the learned request limit by ``decrease_factor``, once per cool-down (concurrent
  failures are one event), or sets it just below the ceiling when it refused a probe. An
  ``observed_limit`` replaces the learned limit instead. Either way
  the count the backend refused (``observed_limit + 1``, or the limit in force) becomes the
  *ceiling* (unless it is the configured limit: a stated limit is trusted, a refusal at it is a
  lagging window). Each window that passes with admissions and no throttle adds
  ``increase_step``, up to the configured limit, freely below the ceiling; growing to it is a
  *probe*, allowed one window after the refusal at first. A probe the backend refuses again
  doubles the probe windows (up to ``max_probe_windows``), so a known limit costs ever fewer
  refusals, and the limit grows no further while probing; an admission that found the window
  holding the ceiling's count, a window after the last throttle, and drew no throttle lifts the
  ceiling (the backend raised its limit) and resets them; a refusal below the ceiling (a lowered
  limit) sets a new ceiling at one probe window. A learned limit below the
  configured one is *paced* (admissions ``window / limit`` apart, :mod:`._pacing`), never a cap
  the window must shed down to: after a throttle the backend gets dialogue again at the learned
  rate as soon as the cool-down ends, not once a whole window has passed (work below dialogue
  still leaves the dialogue's reserve of the learned window free).
- **Pacing.** With ``pace_evenly`` the configured limits are spread evenly over the window too
  (an operator's stated RPM/TPM: a provider that counts them per shorter window never refuses),
  each ``pacing_margin`` slower than stated. The strictest pace of the stated, learned and
  reported rates wins.
- **Rate-limit headers** set a budget of requests and tokens that holds until their reset and is
  taken at face value. The limits they report are learned with their window (the longest reset
  seen, not an assumed minute) and paced; while a reported limit is known, a throttle costs its
  cool-down only: the provider has said what it allows, and one refusal does not lower it.
- **Checkpoints.** :meth:`QuotaPolicy.quota_state` is everything learned (the dialogue demand too) and spent, in seconds
  relative to ``now``; :meth:`QuotaPolicy.restore_quota_state` puts it into a fresh policy (a model
  actor restarted in another process, on another clock), so a restart cannot burst the quota.
- Token estimates are charged at admission; ``release(tokens_used=…)`` corrects the charge while
  it is still in the window. Usage above the estimate can overshoot the token budget by the
  difference, since an admission cannot be undone.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque

import msgspec

from .headroom import DialogueReserve, Headroom
from .ordering import NPC_WORK_BAND, ClassQueue, Ledger, QueueEntry
from .tickets import Priority, Ticket
from ._pacing import PACING_MARGIN, Grid, PaceState, ReportedRate, pace_interval

__all__ = [
    "Decision",
    "Expiry",
    "PolicyStatistics",
    "Priority",
    "QuotaLimits",
    "QuotaPolicy",
    "QuotaState",
    "Ticket",
    "TicketTooLarge",
]

# A deadline failure always tells the client to wait at least this long: the wire carries whole
# seconds, and "retry after 0 s" would invite an immediate retry storm.
_MIN_RETRY_AFTER = 1.0
# Caps the backoff exponent so that a long throttle streak cannot overflow a float.
_MAX_DOUBLINGS = 30
# Weight of the latest admission in the average time an admission runs.
_HOLD_SMOOTHING = 0.2


class QuotaLimits(msgspec.Struct, frozen=True, kw_only=True):
    """One backend's quota and how the policy adapts to it. ``None`` means no limit.

    A Pixel running Gemini Nano fails with BUSY after about 36-41 generations in its rolling
    window; pacing it at ``min_interval_seconds=1.0`` and honouring ML Kit's retry delay avoids
    that.
    """

    window_seconds: float = 60.0
    requests_per_window: int | None = None
    tokens_per_window: int | None = None
    max_concurrency: int | None = None
    min_interval_seconds: float = 0.0
    backoff_seconds: float = 1.0  # first cool-down after a throttle without retry_after
    max_backoff_seconds: float = 60.0
    decrease_factor: float = 0.8  # multiplicative decrease of the learned request limit
    increase_step: int = 1  # additive increase per throttle-free, fully used window
    max_probe_windows: int = 16  # longest wait, in windows, before probing above a refused count again
    pace_evenly: bool = False  # spread the configured limits evenly over the window
    pacing_margin: float = PACING_MARGIN  # paced this much slower than the rate

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window_seconds) and self.window_seconds > 0):
            raise ValueError("window_seconds must be a positive number")
        for name in ("requests_per_window", "tokens_per_window", "max_concurrency"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 or None")
        if self.min_interval_seconds < 0:
            raise ValueError("min_interval_seconds must not be negative")
        if not 0 < self.backoff_seconds <= self.max_backoff_seconds:
            raise ValueError("need 0 < backoff_seconds <= max_backoff_seconds")
        if not 0 < self.decrease_factor < 1:
            raise ValueError("decrease_factor must lie strictly between 0 and 1")
        if self.increase_step < 0:
            raise ValueError("increase_step must not be negative")
        if self.max_probe_windows < 1:
            raise ValueError("max_probe_windows must be at least 1")
        if not 0 <= self.pacing_margin < 1:
            raise ValueError("pacing_margin must lie in [0, 1)")


class Expiry(msgspec.Struct, frozen=True):
    """A ticket whose deadline passed while queued, and when a retry may succeed."""

    ticket: Ticket
    retry_after: float  # seconds from the poll that expired it


class Decision(msgspec.Struct, frozen=True):
    """What one :meth:`QuotaPolicy.poll` decided."""

    admitted: tuple[Ticket, ...] = ()  # in admission order
    expired: tuple[Expiry, ...] = ()
    next_wakeup: float | None = None  # poll again then, or when something is released or submitted


class PolicyStatistics(msgspec.Struct, frozen=True):
    """A snapshot as of the latest call."""

    queued: tuple[int, ...]  # by Priority value
    running: int
    admitted: int
    expired: int
    cancelled: int
    throttles: int
    requests_limit: int | None  # the learned request limit per window
    requests_in_window: int
    tokens_in_window: int
    cooling_down_until: float | None
    taken: int = 0  # answered by another ticket's admission (items of coalesced batches)
    dialogue_reserve: int = 0  # window slots still kept for dialogue (the reserve less its use)
    pace_seconds: float | None = None  # seconds between admissions while paced
    reported_limit: int | None = None  # requests per reported window, from the headers
    reported_window: float | None = None  # the provider's window, learned from its resets


class QuotaState(msgspec.Struct, frozen=True, kw_only=True):
    """What a :class:`QuotaPolicy` has learned and spent, times in seconds from the moment it
    was taken (negative: in the past), for a fresh policy on another clock to go on from."""

    window: list[tuple[float, int, bool]]  # per admission in the window: seconds it stays, tokens, dialogue
    requests_limit: int | None
    cool_down: float  # seconds left
    streak: int
    last_throttle: float | None
    last_admit: float | None
    requests_pace: PaceState
    tokens_pace: PaceState
    reported_requests: ReportedRate
    reported_tokens: ReportedRate
    header: tuple[int | None, int | None, float] | None = None  # budget: requests, tokens, reset in
    ceiling: int | None = None  # the request count per window the backend last refused
    probe_windows: int = 1  # windows between a refusal at the ceiling and the next probe
    probe_in: float | None = None  # seconds until a probe at the ceiling is allowed
    dialogue_demand: float | None = None  # dialogue requests expected per window (None: none learned)

    def aged(self, seconds: float) -> QuotaState:
        """The same state ``seconds`` later (it was kept somewhere meanwhile)."""
        def later(offset: float | None) -> float | None:
            return None if offset is None else offset - seconds

        header = self.header
        return msgspec.structs.replace(
            self,
            window=[(left - seconds, tokens, dialogue) for left, tokens, dialogue in self.window if left > seconds],
            cool_down=max(0.0, self.cool_down - seconds),
            last_throttle=later(self.last_throttle),
            last_admit=later(self.last_admit),
            requests_pace=msgspec.structs.replace(self.requests_pace, next_in=self.requests_pace.next_in - seconds),
            tokens_pace=msgspec.structs.replace(self.tokens_pace, next_in=self.tokens_pace.next_in - seconds),
            header=None if header is None or header[2] <= seconds else (header[0], header[1], header[2] - seconds),
            probe_in=later(self.probe_in),
        )


class TicketTooLarge(ValueError):
    """The ticket needs more tokens than one window allows, so it could never start."""


class _Charge:
    """One admission in the rolling window."""

    __slots__ = ("dialogue", "expires_at", "tokens")

    def __init__(self, expires_at: float, tokens: int, dialogue: bool) -> None:
        self.expires_at = expires_at
        self.tokens = tokens
        self.dialogue = dialogue


class _HeaderBudget:
    """What the backend's rate-limit headers said is left until ``reset_at``."""

    __slots__ = ("requests", "reset_at", "tokens")

    def __init__(self, requests: int | None, tokens: int | None, reset_at: float) -> None:
        self.requests = requests
        self.tokens = tokens
        self.reset_at = reset_at


class QuotaPolicy:
    """Admission policy for one backend; see the module docstring for the contract.

    Drive it by calling :meth:`poll` after every submit, cancel, release or throttle report, and
    again at ``next_wakeup``. Not thread-safe: one owner (an actor, a scheduler) calls it.
    """

    def __init__(self, limits: QuotaLimits, *, headroom: Headroom | None = None, ledger: Ledger | None = None,
                 reserve: DialogueReserve | None = None) -> None:
        """``ledger`` may be shared by the policies of backends that serve the same owners (the
        phones of one pool): an owner served on one then waits its turn on the others too.
        ``reserve`` (with its own headroom settings, instead of ``headroom``) may be shared by
        the policies of backends that serve one dialogue demand (the phones of one pool): each
        keeps headroom for its share of the dialogue all of them see."""
        if reserve is not None and headroom is not None:
            raise ValueError("give headroom or a shared reserve (which has its own), not both")
        if reserve is not None and reserve.period != limits.window_seconds:
            raise ValueError("a shared reserve counts dialogue per window: its period must be the window")
        self._limits = limits
        self._ledger = ledger if ledger is not None else Ledger()
        # Dialogue is a class of its own; decisions and background work share one queue.
        dialogue = ClassQueue(self._ledger, by_deadline=True)
        npc_work = ClassQueue(self._ledger, NPC_WORK_BAND)
        self._classes = (dialogue, npc_work, npc_work)
        self._order = (dialogue, npc_work)
        self._queued: dict[int, QueueEntry] = {}
        self._deadlines: list[tuple[float, int, QueueEntry]] = []
        self._serial = itertools.count()
        self._running: dict[int, _Charge] = {}
        self._hold = -1.0  # seconds an admission runs, a moving average (negative: none seen)
        self._window: deque[_Charge] = deque()
        self._window_tokens = 0
        self._window_dialogue = 0
        self._reserve = reserve or DialogueReserve(headroom or Headroom(), limits.window_seconds)
        self._reserve.join()
        self._now = -math.inf
        self._last_admit = -math.inf
        self._cool_until = -math.inf
        self._last_throttle = -math.inf
        self._streak = 0
        self._limit = limits.requests_per_window
        self._grown_at = -math.inf
        self._ceiling: int | None = None
        self._probe_windows = 1
        self._probe_at = -math.inf
        self._filled = 0  # what the window held with the last admission, if all of it was accepted
        self._header: _HeaderBudget | None = None
        self._request_pace = Grid()
        self._token_pace = Grid()
        self._reported_requests = ReportedRate()
        self._reported_tokens = ReportedRate()
        self._update_pace()
        self._token_unit = _token_unit(limits)
        self._admitted = 0
        self._expired = 0
        self._cancelled = 0
        self._taken = 0
        self._throttles = 0

    # -- queue -----------------------------------------------------------------------------

    def submit(self, ticket: Ticket) -> None:
        """Queue ``ticket``. Raises ``ValueError`` for a live duplicate id or negative tokens,
        :class:`TicketTooLarge` when it needs more tokens than one window allows."""
        if ticket.id in self._queued or ticket.id in self._running:
            raise ValueError(f"ticket {ticket.id} is already queued or running")
        if ticket.tokens < 0:
            raise ValueError("ticket tokens must not be negative")
        budget = self._limits.tokens_per_window
        if budget is not None and ticket.tokens > budget:
            raise TicketTooLarge(
                f"The request needs {ticket.tokens} tokens; the backend allows {budget} per window."
            )
        serial = next(self._serial)
        entry = QueueEntry(ticket, 0.0 if ticket.follow_up else self._cost(ticket.tokens), serial)
        self._queued[ticket.id] = entry
        self._classes[ticket.priority].push(entry)
        if ticket.deadline is not None:
            heapq.heappush(self._deadlines, (ticket.deadline, serial, entry))
        if ticket.priority is Priority.DIALOGUE:
            self._reserve.observe(max(self._now, ticket.enqueued_at))

    def take(self, ticket_id: int) -> bool:
        """A queued ticket was answered by another's admission (an item of a coalesced batch,
        whose generation is the other ticket's): it leaves its queue, charged in fair queuing at
        its own place as if admitted, and takes no slot of the window. ``False`` if it is not
        queued (admitted, expired, cancelled)."""
        return self._dequeue(ticket_id, served=True)

    def service(self, owner: str) -> float:
        """``owner``'s place in fair queuing: the start tag its next ticket would get (lower is
        less served)."""
        return self._ledger.start_tag(owner)

    def cancel(self, ticket_id: int) -> bool:
        """Remove a queued ticket at once; ``False`` if it is not queued (running or ended). A
        cancelled dialogue ticket is no dialogue demand here (:mod:`.headroom`)."""
        return self._dequeue(ticket_id, served=False)

    def _dequeue(self, ticket_id: int, *, served: bool) -> bool:
        entry = self._queued.pop(ticket_id, None)
        if entry is None:
            return False
        queue = self._classes[entry.ticket.priority]
        if served:
            queue.take(entry)
            self._taken += 1
        else:
            queue.remove(entry)
            self._cancelled += 1
        if entry.ticket.priority is Priority.DIALOGUE:
            # Taken, it needs no slot; cancelled, none here: a device pool that moves a waiting
            # step to another phone submits it there, where it counts (once, not once a phone).
            self._reserve.withdraw(max(self._now, entry.ticket.enqueued_at))
        return True

    def poll(self, now: float) -> Decision:
        """Admit what may start at ``now``, expire what is past its deadline, say when to look
        again. ``next_wakeup`` is ``None`` when only a release or a submit can change anything."""
        now = self._advance(now)
        expired: list[Expiry] = []
        admitted = self._admit_ready(now, expired)
        expired.extend(self._expire_due(now))
        return Decision(tuple(admitted), tuple(expired), self._next_wakeup(now))

    def release(self, ticket_id: int, now: float, *, tokens_used: int | None = None) -> None:
        """End a running ticket, optionally correcting its token charge. ``KeyError`` if the
        ticket is not running."""
        now = self._advance(now)
        if ticket_id not in self._running:
            raise KeyError(f"ticket {ticket_id} is not running")
        if tokens_used is not None and tokens_used < 0:
            raise ValueError("tokens_used must not be negative")
        charge = self._running.pop(ticket_id)
        held = now - (charge.expires_at - self._limits.window_seconds)
        self._hold = held if self._hold < 0 else self._hold + _HOLD_SMOOTHING * (held - self._hold)
        if tokens_used is not None:
            if charge.expires_at > now:
                self._window_tokens += tokens_used - charge.tokens
            charge.tokens = tokens_used

    # -- feedback from the backend ---------------------------------------------------------

    def on_throttled(
        self, now: float, *, retry_after: float | None = None, observed_limit: int | None = None
    ) -> None:
        """The backend refused a request for quota (BUSY, 429): cool down and adapt."""
        now = self._advance(now)
        self._throttles += 1
        refused = self._limit
        if observed_limit is not None:
            self._limit = self._capped(observed_limit)
            refused = observed_limit + 1
        if now >= self._cool_until:  # a new episode; reports during a cool-down are the same one
            self._streak = self._streak + 1 if now - self._last_throttle < self._limits.window_seconds else 1
            if not self._reported_requests.known:
                # Nothing learned yet: what the window held was refused.
                refused = refused if refused is not None else len(self._window)
                probe = self._ceiling is not None and refused >= self._ceiling
                if observed_limit is None:
                    if probe:  # a refused probe: below the ceiling was accepted before
                        self._limit = self._capped(self._ceiling - 1)
                    else:
                        self._decrease_limit()
                self._remember_ceiling(refused, probe, now)
            pause = retry_after if retry_after is not None else self._backoff()
            self._cool_until = now + max(0.0, pause)
        elif retry_after is not None:
            self._cool_until = max(self._cool_until, now + retry_after)
        self._last_throttle = now
        self._grown_at = now
        self._filled = 0
        self._update_pace()

    def on_rate_limit_headers(
        self,
        now: float,
        *,
        remaining_requests: int | None = None,
        remaining_tokens: int | None = None,
        reset_seconds: float,
        limit_requests: int | None = None,
        limit_tokens: int | None = None,
        reset_requests: float | None = None,
        reset_tokens: float | None = None,
    ) -> None:
        """The backend reported what is left of its quota until ``reset_seconds`` from now, and
        (where its headers say) its limits and each one's reset, from which its rate is learned."""
        now = self._advance(now)
        self._header = _HeaderBudget(remaining_requests, remaining_tokens, now + reset_seconds)
        learned = self._reported_requests.observe(limit_requests, reset_requests)
        if self._reported_tokens.observe(limit_tokens, reset_tokens) or learned:
            self._update_pace()

    def statistics(self, now: float | None = None) -> PolicyStatistics:
        """Counters and gauges as of ``now`` (the rolling window slid to it), or of the latest
        call. A backend nobody polled for a while has shed admissions from its window since: a
        snapshot of the latest call would still count them, and a device pool choosing by room
        would go on seeing a long idle phone as full."""
        if now is not None:
            self._advance(now)
        return PolicyStatistics(
            queued=tuple(self._classes[p].queued(p) for p in Priority),
            running=len(self._running),
            admitted=self._admitted,
            expired=self._expired,
            cancelled=self._cancelled,
            taken=self._taken,
            throttles=self._throttles,
            requests_limit=self._limit,
            requests_in_window=len(self._window),
            tokens_in_window=self._window_tokens,
            cooling_down_until=self._cool_until if self._cool_until > self._now else None,
            dialogue_reserve=self._reserve_left(self._now),
            pace_seconds=self._request_pace.interval or None,
            reported_limit=self._reported_requests.limit,
            reported_window=self._reported_requests.window or None,
        )

    def quota_state(self, now: float) -> QuotaState:
        """Everything learned and spent as of ``now`` (see :class:`QuotaState`)."""
        now = self._advance(now)
        header = self._header
        return QuotaState(
            window=[(charge.expires_at - now, charge.tokens, charge.dialogue) for charge in self._window],
            requests_limit=self._limit,
            cool_down=max(0.0, self._cool_until - now),
            streak=self._streak,
            last_throttle=_since(self._last_throttle, now),
            last_admit=_since(self._last_admit, now),
            requests_pace=self._request_pace.state(now),
            tokens_pace=self._token_pace.state(now),
            reported_requests=msgspec.structs.replace(self._reported_requests),
            reported_tokens=msgspec.structs.replace(self._reported_tokens),
            header=None if header is None else (header.requests, header.tokens, header.reset_at - now),
            ceiling=self._ceiling,
            probe_windows=self._probe_windows,
            probe_in=_since(self._probe_at, now),
            dialogue_demand=self._reserve.learned(now),
        )

    def restore_quota_state(self, state: QuotaState, now: float) -> None:
        """Go on from ``state``, taken by another policy for the same backend, as of ``now``.
        Call it on a fresh policy, before anything is submitted."""
        now = self._advance(now)
        for left, tokens, dialogue in state.window:
            if left > 0:
                self._window.append(_Charge(now + left, tokens, dialogue))
                self._window_tokens += tokens
                self._window_dialogue += dialogue
        self._limit = state.requests_limit
        self._cool_until = now + state.cool_down if state.cool_down > 0 else -math.inf
        self._streak = state.streak
        self._last_throttle = _at(state.last_throttle, now)
        self._last_admit = _at(state.last_admit, now)
        self._grown_at = max(self._grown_at, self._last_throttle)
        self._ceiling, self._probe_windows = state.ceiling, state.probe_windows
        self._probe_at = _at(state.probe_in, now)
        if state.dialogue_demand is not None:
            self._reserve.restore(state.dialogue_demand, now)
        self._reported_requests = msgspec.structs.replace(state.reported_requests)
        self._reported_tokens = msgspec.structs.replace(state.reported_tokens)
        if state.header is not None:
            self._header = _HeaderBudget(state.header[0], state.header[1], now + state.header[2])
        self._update_pace()
        self._request_pace.restore(state.requests_pace, now)
        self._token_pace.restore(state.tokens_pace, now)
        self._advance(now)

    # -- admission -------------------------------------------------------------------------

    def earliest_start(self, tokens: int, now: float) -> float:
        """An estimate of the earliest moment a step of ``tokens`` submitted now could start, from
        the time-based limits alone (the quota window, pacing, cool-down, tokens, the provider's
        headers) as they stand, as for dialogue (nothing kept back): concurrency and the queue
        are left out, so a router asking whether to wait here learns only what must pass first."""
        now = self._advance(now)
        probe = Ticket(id=0, owner="", priority=Priority.DIALOGUE, tokens=tokens, enqueued_at=now, deadline=None)
        return max(now, self._ready_at(probe, now))

    def _advance(self, now: float) -> float:
        if self._now == -math.inf:
            self._reserve.begin(now)  # the first period's rate counts from the first look
        now = max(now, self._now)
        self._now = now
        window = self._window
        while window and window[0].expires_at <= now:
            charge = window.popleft()
            self._window_tokens -= charge.tokens
            self._window_dialogue -= charge.dialogue
        if self._header is not None and self._header.reset_at <= now:
            self._header = None
        return now

    def _admit_ready(self, now: float, expired: list[Expiry]) -> list[Ticket]:
        admitted: list[Ticket] = []
        while (top := self._top()) is not None:
            queue, entry = top
            ticket = entry.ticket
            late = ticket.deadline is not None and ticket.deadline < now
            if not late and self._can_start(ticket, now):
                queue.pop(entry, self._behind(queue))
                self._start(ticket, now)
                admitted.append(ticket)
            elif ticket.deadline is not None and ticket.deadline <= now:
                expired.append(self._expire(entry, now))
            else:
                break
        return admitted

    def _behind(self, queue: ClassQueue) -> float:
        """The tag of the NPC work waiting behind ``queue`` (dialogue), for virtual time."""
        npc_work = self._order[-1]
        return math.inf if queue is npc_work else npc_work.head_tag()

    def _top(self) -> tuple[ClassQueue, QueueEntry] | None:
        dialogue = self._order[0]
        if dialogue.due:  # the service estimate only when a dialogue line has a deadline to miss
            entry = dialogue.urgent(self._now, self._service_seconds())
            if entry is not None:
                return dialogue, entry
        for queue in self._order:
            entry = queue.head()
            if entry is not None:
                return queue, entry
        return None

    def _spacing(self) -> float:
        """Seconds between admissions at the rate the time limits allow."""
        spacing = self._limits.min_interval_seconds
        if self._limit is not None:
            spacing = max(spacing, self._limits.window_seconds / self._limit)
        return max(spacing, self._request_pace.interval)

    def _service_seconds(self) -> float:
        """Seconds between admissions to expect: the time limits' rate, or the generations' own
        when running tickets take longer per slot of concurrency."""
        cap = self._limits.max_concurrency
        return max(self._spacing(), 0.0 if cap is None else self._hold / cap)

    def _can_start(self, ticket: Ticket, now: float) -> bool:
        return not self._full() and self._ready_at(ticket, now) <= now

    def _full(self) -> bool:
        cap = self._limits.max_concurrency
        return cap is not None and len(self._running) >= cap

    def _ready_at(self, ticket: Ticket, now: float) -> float:
        """The earliest time the time-based limits let ``ticket`` start (concurrency aside)."""
        kept = 0 if ticket.priority is Priority.DIALOGUE else self._reserve_left(now)
        return max(
            self._cool_until,
            self._last_admit + self._limits.min_interval_seconds,
            self._request_pace.free_at(),
            self._token_pace.free_at(),
            self._requests_free_at(0),
            # Lending: the reserve needs to be free only by the time the next admission could
            # start anyway (the pacing interval), so the slots that free by then are lent.
            self._requests_free_at(kept) - self._lend_seconds() if kept else -math.inf,
            -math.inf if ticket.priority is Priority.DIALOGUE else self._gap_free_at(now),
            self._tokens_free_at(ticket.tokens),
            self._header_free_at(ticket.tokens),
        )

    def _lend_seconds(self) -> float:
        """How far ahead reserved slots are lent: a dialogue line that finds a lent slot taken
        waits for a slot that frees within this, which its pacing would have cost it anyway."""
        pace = self._request_pace  # its next slot may come up to its slack early
        return max(self._limits.min_interval_seconds, pace.interval - pace.slack)

    def _gap_free_at(self, now: float) -> float:
        """When work below dialogue may take a free slot, leaving the rest, and the slots the
        window frees meanwhile, for the dialogue expected before each of its next frees
        (:meth:`.DialogueReserve.take_at`; lent as above)."""
        cap, window = self._limit, self._window  # the limit the reserve is kept of
        if cap is None or not window or len(window) >= cap:
            return -math.inf  # nothing is free: the window's own limit decides
        frees = (charge.expires_at for charge in window)
        return self._reserve.take_at(now, frees, cap - len(window) - 1, cap) - self._lend_seconds()

    def _reserve_left(self, now: float) -> int:
        """Window slots kept free for dialogue now."""
        return self._reserve.kept(now, self._limit, self._window_dialogue)

    def _requests_free_at(self, kept: int = 0) -> float:
        # The configured limit caps the rolling window; a lower learned one is paced, and caps
        # it only for work that must leave the dialogue's reserve free.
        configured = self._limits.requests_per_window
        cap = configured if configured is not None else self._limit if kept else None
        if cap is None:
            return -math.inf
        limit, window = cap - kept, self._window
        if len(window) < limit:
            return -math.inf
        # The window must shed its oldest len - limit + 1 admissions. (The reserve may shrink
        # before then; the policy is polled again at the reserve's next change.)
        return window[len(window) - limit].expires_at

    def _tokens_free_at(self, tokens: int) -> float:
        budget = self._limits.tokens_per_window
        if budget is None:
            return -math.inf
        excess = self._window_tokens + tokens - budget
        if excess <= 0:
            return -math.inf
        freed = 0
        for charge in self._window:
            freed += charge.tokens
            if freed >= excess:
                break
        return charge.expires_at

    def _header_free_at(self, tokens: int) -> float:
        header = self._header
        if header is None:
            return -math.inf
        spent = header.requests is not None and header.requests <= 0
        short = header.tokens is not None and tokens > header.tokens
        return header.reset_at if spent or short else -math.inf

    def _start(self, ticket: Ticket, now: float) -> None:
        del self._queued[ticket.id]
        dialogue = ticket.priority is Priority.DIALOGUE
        charge = _Charge(now + self._limits.window_seconds, ticket.tokens, dialogue)
        self._window.append(charge)
        self._window_tokens += ticket.tokens
        self._window_dialogue += dialogue
        self._running[ticket.id] = charge
        self._last_admit = now
        self._request_pace.take(now)
        self._token_pace.take(now, ticket.tokens)
        self._admitted += 1
        if self._header is not None:
            _spend(self._header, ticket.tokens)
        self._grow_limit(now)
        # No throttle for a window: everything in it was accepted (a refused admission stays
        # charged until it leaves); this one is, unless a throttle follows.
        self._filled = len(self._window) if now - self._last_throttle >= self._limits.window_seconds else 0

    # -- expiry ----------------------------------------------------------------------------

    def _expire_due(self, now: float) -> list[Expiry]:
        expired: list[Expiry] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            entry = heapq.heappop(deadlines)[2]
            if entry.live:
                expired.append(self._expire(entry, now))
        return expired

    def _expire(self, entry: QueueEntry, now: float) -> Expiry:
        ticket = entry.ticket
        del self._queued[ticket.id]
        self._classes[ticket.priority].remove(entry)
        self._expired += 1
        return Expiry(ticket, self._retry_after(ticket, now))

    def _retry_after(self, ticket: Ticket, now: float) -> float:
        """Estimate when a retry could start: the time limits, or the work queued ahead."""
        ahead = sum(self._classes[p].queued(p) for p in Priority if p <= ticket.priority)
        wait = max(self._ready_at(ticket, now) - now, ahead * self._spacing())
        return max(_MIN_RETRY_AFTER, wait)

    def _next_wakeup(self, now: float) -> float | None:
        times: list[float] = []
        deadlines = self._deadlines
        while deadlines and not deadlines[0][2].live:
            heapq.heappop(deadlines)
        if deadlines:
            times.append(deadlines[0][0])
        top = self._top()
        if top is not None and not self._full():
            ticket = top[1].ticket
            times.append(self._ready_at(ticket, now))
            change = self._reserve.next_change(now)
            if ticket.priority is not Priority.DIALOGUE and change is not None and self._reserve_left(now):
                times.append(change)  # the reserve may shrink then and let this ticket start
        return min(times) if times else None

    # -- adaptation ------------------------------------------------------------------------

    def _cost(self, tokens: int) -> float:
        unit = self._token_unit
        return 1.0 if unit is None else max(1.0, tokens / unit)

    def _capped(self, limit: int) -> int:
        configured = self._limits.requests_per_window
        limit = max(1, limit)
        return limit if configured is None else min(limit, configured)

    def _decrease_limit(self) -> None:
        # With no limit learned yet, what the window held when the backend refused is the
        # first estimate of its limit.
        base = self._limit if self._limit is not None else len(self._window)
        if base > 0:
            self._limit = max(1, math.floor(base * self._limits.decrease_factor))

    def _update_pace(self) -> None:
        """Pace at the strictest of the stated, learned and reported rates (none: no pacing)."""
        limits = self._limits
        margin, window = limits.pacing_margin, limits.window_seconds
        paces: list[tuple[float, float]] = [(0.0, window)]  # (interval, the window it spreads)
        configured, learned = limits.requests_per_window, self._limit
        if limits.pace_evenly and configured is not None:
            paces.append((pace_interval(configured, window, margin), window))
        if learned is not None and (configured is None or learned < configured):
            paces.append((pace_interval(learned, window, 0.0), window))  # a guess: no margin on it
        if self._reported_requests.known:
            paces.append((self._reported_requests.interval(margin), self._reported_requests.window))
        self._request_pace.set_pace(*max(paces), margin, last=self._last_admit)
        token_paces: list[tuple[float, float]] = [(0.0, window)]
        if limits.pace_evenly and limits.tokens_per_window is not None:
            token_paces.append((pace_interval(limits.tokens_per_window, window, margin), window))
        if self._reported_tokens.known:
            token_paces.append((self._reported_tokens.interval(margin), self._reported_tokens.window))
        self._token_pace.set_pace(*max(token_paces), margin)

    def _remember_ceiling(self, refused: int, probe: bool, now: float) -> None:
        """The backend refused ``refused`` admissions per window, a ``probe`` at the ceiling
        or not (see the module docstring)."""
        if refused < 1:
            return
        configured = self._limits.requests_per_window
        if probe:  # the ceiling holds
            self._probe_windows = min(2 * self._probe_windows, self._limits.max_probe_windows)
        elif configured is None or refused < configured:  # the first refusal, or a lowered limit
            self._ceiling, self._probe_windows = refused, 1
        else:
            return  # refused at the stated limit: a lagging window, not news; it is trusted
        self._probe_at = now + self._probe_windows * self._limits.window_seconds

    def _grow_limit(self, now: float) -> None:
        if self._ceiling is not None and self._filled >= self._ceiling:
            self._ceiling, self._probe_windows = None, 1  # the backend took what it once refused
        limit, configured = self._limit, self._limits.requests_per_window
        if limit is None or (configured is not None and limit >= configured):
            return
        if now - self._grown_at < self._limits.window_seconds:
            return
        self._grown_at = now
        ceiling = self._ceiling
        if ceiling is not None and limit >= ceiling:
            return  # probing: no further until the backend takes the count it refused
        grown = self._capped(limit + self._limits.increase_step)
        if ceiling is not None and grown >= ceiling and now < self._probe_at:
            grown = max(limit, ceiling - 1)  # up to just below what was refused, no probe yet
        if grown != limit:
            self._limit = grown
            self._update_pace()

    def _backoff(self) -> float:
        doublings = min(self._streak - 1, _MAX_DOUBLINGS)
        return min(self._limits.max_backoff_seconds, self._limits.backoff_seconds * 2.0**doublings)


def _token_unit(limits: QuotaLimits) -> float | None:
    """Tokens per request equivalent, for the fair-queuing cost; ``None`` when tokens are free."""
    if limits.tokens_per_window is None:
        return None
    if limits.requests_per_window is None:
        return 1.0
    return limits.tokens_per_window / limits.requests_per_window


def _since(moment: float, now: float) -> float | None:
    return moment - now if math.isfinite(moment) else None


def _at(offset: float | None, now: float) -> float:
    return -math.inf if offset is None else now + offset


def _spend(header: _HeaderBudget, tokens: int) -> None:
    if header.requests is not None:
        header.requests -= 1
    if header.tokens is not None:
        header.tokens -= tokens
