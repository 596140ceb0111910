"""Reserved headroom: the share of a quota window kept for player dialogue (pure).

A window's last requests must not all go to background work while a player is about to speak:
once barks have spent a rolling window, a dialogue line waits for the window to slide, which on a
Nano phone is tens of seconds. So the policy keeps some of every window for dialogue, sized by the
dialogue demand it has seen:

- **Demand** is counted in fixed periods of one window. The estimate is an exponentially weighted
  moving average (EWMA) of dialogue tickets submitted per period (less those another ticket's
  generation answered: a coalesced batch's members need no slot of their own, and counting them
  kept phones idle for dialogue that never came, so dialogue was admitted at once and its batches
  never formed; and less those cancelled while queued: a device pool moves a step waiting on a
  phone that cools down to another phone, which counts it, and it is one line, not one a
  phone), weight ``smoothing`` for the
  latest period, or the count of the current period when that is higher (a surge raises the
  reserve at once; a lull lowers it one period at a time).
- **The first period** has no average to go on, and its count so far lags the demand: a fresh
  phone fed a background flood spent its whole first window (36 admissions a second apart)
  before the players' lines had been counted, and every line of the window's last 25 s waited for
  it to slide. So until a period closes the demand is the *rate* seen so far, the count over the
  time since the backend's clock started (at least ``1/60`` of a period: the first line alone
  implies the cap); from then on the average and the count of the current period take over. A
  checkpoint carries the learned demand
  (:meth:`DialogueReserve.learned`, :meth:`DialogueReserve.restore`).
- **Shared**: backends that serve one dialogue demand (the phones of a device pool) share one
  reserve; each expects its equal share of the dialogue all of them see. Counted per phone, the
  phone that got most lines kept most room, so the pool (which sends a line where there is most
  room) sent it more, and the other phones filled with background work until the lines had
  nowhere to go.
- **Reserve** = ``ceil(factor × demand)`` slots of each rolling window, at most ``cap`` × the
  window's request limit (nine tenths, rounded down: a backend allowing one request per window
  reserves nothing, and background work keeps a tenth of every window whatever the players say).
  Capped at half, as before, players speaking more than half a window (forty on a farm of eight
  phones) lost the rest to a background flood early in each window, and the lines of its last
  part waited for it to slide: the farm's dialogue waited 0.45 s at p99 beside ambient
  conversations, against 0.14 s without them.
- **Use**: dialogue admitted within the rolling window counts against the reserve, but ``floor``
  slots stay free for dialogue whatever the count (a player may speak at any moment; without
  them, once the expected lines have come, barks refill every slot the window frees and the next
  line waits for the window to slide). A ticket of a lower class may start only while the window
  keeps that room. Dialogue itself may use the whole window.
- **Gaps**: a window spent in a burst frees nothing until its first admission leaves it, which
  on a Nano phone fed flat out is 24 of every 60 seconds. Counting the window's dialogue against
  the reserve leaves only ``floor`` slots for the dialogue that comes in such a gap, and the rest
  waits for the window to slide, past its deadline. So a ticket of a lower class also leaves the
  slots the dialogue expected before each of the window's next frees needs (:meth:`DialogueReserve.take_at`:
  it may take one of the window's free slots only that close to each free, with the frees
  before it counted as slots): not only the next free, since after a dense run of frees the
  one after may be half a window away, and the dialogue of that gap must find its slots free.
- **Lending** (the policy's part): a kept slot goes to other work when the rolling window frees
  another within the backend's pacing interval, so a paced backend with no dialogue waiting loses
  nothing to the reserve; a line that finds the lent slot taken could not have started before
  the next paced admission anyway, by which time the slot has come back. Without pacing nothing
  is lent, and work that is not dialogue loses ``floor`` slots per window when no dialogue comes.

Only the request limit is reserved; a backend limited by tokens alone keeps no headroom.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import msgspec

__all__ = ["NO_HEADROOM", "DialogueReserve", "Headroom"]

# The most of a window's next frees a taking is checked against: all of a phone's (36), the
# nearest of a large API window's, which keeps a poll's cost bounded.
_LOOKAHEAD = 64
# The first period's rate is extrapolated over at least this part of a period: the first line
# alone, a moment after the backend started, implies no more than this many a window.
_FIRST_PERIOD_PARTS = 60


class Headroom(msgspec.Struct, frozen=True, kw_only=True):
    """How much of each quota window is kept for player dialogue; see the module docstring."""

    floor: int = 1
    cap: float = 0.9  # share of the request limit dialogue may keep
    factor: float = 1.0  # slots kept per dialogue request expected in a window
    smoothing: float = 0.5  # EWMA weight of the latest period

    def __post_init__(self) -> None:
        if self.floor < 0:
            raise ValueError("headroom floor must not be negative")
        if not 0 <= self.cap < 1:
            raise ValueError("headroom cap must be at least 0 and below 1")
        if not (math.isfinite(self.factor) and self.factor >= 0):
            raise ValueError("headroom factor must be a number of at least 0")
        if not 0 < self.smoothing <= 1:
            raise ValueError("headroom smoothing must lie in (0, 1]")


NO_HEADROOM = Headroom(floor=0, cap=0.0, factor=0.0)
"""Keep nothing back: every class competes for the whole window (strict priority alone)."""


class DialogueReserve:
    """The learned dialogue demand of one backend, or of the backends that share it (each calls
    :meth:`join`), and the reserve it implies at each."""

    __slots__ = ("_backends", "_count", "_estimate", "_period", "_period_end", "_settings")

    def __init__(self, settings: Headroom, period_seconds: float) -> None:
        self._settings = settings
        self._period = period_seconds
        self._backends = 0  # the backends that share this demand (joined)
        self._period_end: float | None = None  # set by the first clock reading (begin, observe)
        self._estimate: float | None = None  # None until the first period closes
        self._count = 0

    @property
    def period(self) -> float:
        return self._period

    def join(self) -> None:
        """One more backend serves this demand: each expects its share of it."""
        self._backends += 1

    def begin(self, now: float) -> None:
        """The backend's clock reads ``now`` for the first time: the first period starts, unless a
        backend sharing the demand started it."""
        self._roll(now)

    def observe(self, now: float) -> None:
        """A dialogue ticket was submitted at ``now``."""
        self._roll(now)
        self._count += 1

    def withdraw(self, submitted: float) -> None:
        """A dialogue ticket submitted at ``submitted`` was answered by another's generation, or
        cancelled: it is no demand (once its period is rolled into the estimate, it stays there)."""
        if self._count and self._period_end is not None and submitted >= self._period_end - self._period:
            self._count -= 1

    def demand(self, now: float) -> float:
        """Dialogue requests expected per window, at each backend that shares the demand."""
        return self._total(now) / max(1, self._backends)

    def _total(self, now: float) -> float:
        self._roll(now)
        if self._estimate is not None:
            return max(self._estimate, float(self._count))
        if self._period_end is None or not self._count:
            return 0.0
        # No period has closed: the rate seen so far is all there is to go on.
        elapsed = now - (self._period_end - self._period)
        return self._count * self._period / max(elapsed, self._period / _FIRST_PERIOD_PARTS)

    def learned(self, now: float) -> float | None:
        """The demand to go on from elsewhere (a checkpoint): :meth:`demand`, or ``None`` while no
        dialogue was seen and no period has closed."""
        self._roll(now)
        if self._estimate is None and not self._count:
            return None
        return self.demand(now)

    def restore(self, demand: float, now: float) -> None:
        """Go on from ``demand`` (per backend) learned elsewhere, as if a period closed at
        ``now`` with it."""
        self._estimate, self._count = demand * max(1, self._backends), 0
        self._period_end = now + self._period

    def kept(self, now: float, limit: int | None, admitted: int) -> int:
        """Slots of a window of ``limit`` requests to keep free for dialogue, when ``admitted``
        dialogue requests are in the rolling window (0 without a limit)."""
        if limit is None:
            return 0
        settings = self._settings
        expected = math.ceil(settings.factor * self.demand(now) - 1e-9)
        return min(math.floor(settings.cap * limit), max(settings.floor, expected - admitted))

    def take_at(self, now: float, frees: Iterable[float], left: int, limit: int | None) -> float:
        """When work below dialogue may take a free slot and leave ``left`` free: for each of the
        window's next frees (``frees``, soonest first), no earlier than the time the expected
        dialogue takes to arrive the slots left and those freed before it, before that free
        (``-inf``: at once, when what is left covers the cap or no dialogue is expected).
        Only the next ``_LOOKAHEAD`` frees are looked at."""
        settings = self._settings
        rate = settings.factor * self.demand(now) / self._period  # lines a second
        if limit is None or rate <= 0:
            return -math.inf
        # Frees from the cap on, or a window of dialogue away, are covered whenever they come.
        count = min(math.floor(settings.cap * limit), math.ceil(rate * self._period - 1e-9)) - left
        at, step = -math.inf, 1 / rate
        lead = left * step
        for free in itertools.islice(frees, max(0, min(count, _LOOKAHEAD))):
            if free - lead > at:
                at = free - lead
            lead += step
        return at

    def next_change(self, now: float) -> float | None:
        """When the estimate may next fall (the end of the current period; in the first, the
        moment the rate seen so far falls by one a window), if it can."""
        self._roll(now)
        if self._period_end is None or (not self._estimate and self._count == 0):
            return None
        if self._estimate is None:
            expected = math.ceil(self._settings.factor * self.demand(now) - 1e-9)
            if expected > 1:
                start = self._period_end - self._period
                share = self._settings.factor * self._count / max(1, self._backends)
                lower = start + share * self._period / (expected - 1)
                return min(self._period_end, max(start + self._period / _FIRST_PERIOD_PARTS, lower))
        return self._period_end

    def _roll(self, now: float) -> None:
        if not math.isfinite(now):
            return  # the policy has seen no time yet
        if self._period_end is None:
            self._period_end = now + self._period
            return
        if now < self._period_end:
            return
        weight = self._settings.smoothing
        # The first period too is averaged with none before it: taken as the average's first
        # sample, it kept more of the next window idle than the dialogue used (a farm lost
        # about 0.4 % of its throughput) for lines the count of the period covers as they come.
        estimate = weight * self._count + (1 - weight) * (self._estimate or 0.0)
        # Whole periods without dialogue since then decay the estimate further.
        idle = math.floor((now - self._period_end) / self._period)
        estimate *= (1 - weight) ** idle
        self._estimate = estimate if estimate >= 1e-6 else 0.0
        self._count = 0
        self._period_end += (idle + 1) * self._period
