"""QuotaScheduler: quota-aware admission in front of every model backend.

:mod:`.policy` is the pure decision logic (token windows, concurrency, pacing, cool-downs, AIMD
limits, strict priorities, deadlines), with :mod:`.ordering` (fair queuing per owner across
classes, earliest deadline first) and :mod:`.headroom` (the share of a window kept for player
dialogue) beside it, over the tickets of :mod:`.tickets`; :mod:`.scheduler` is the thin anyio shell that backends wrap their calls in::

    scheduler = QuotaScheduler(QuotaLimits(requests_per_window=36, window_seconds=60,
                                           max_concurrency=1, min_interval_seconds=1.0))
    async with scheduler.admit("npc:gorm", Priority.DIALOGUE, deadline_seconds=20) as admission:
        ...  # call the backend; on BUSY / 429 call scheduler.throttled(retry_after=…)
"""

from .headroom import NO_HEADROOM, DialogueReserve, Headroom
from .ordering import Ledger
from .policy import (
    Decision,
    Expiry,
    PolicyStatistics,
    QuotaLimits,
    QuotaPolicy,
    QuotaState,
    TicketTooLarge,
)
from .scheduler import Admission, Clock, ManualClock, MonotonicClock, QuotaScheduler, Seat, SeatTaken
from .tickets import Priority, Ticket

__all__ = [
    "Admission",
    "Clock",
    "Decision",
    "DialogueReserve",
    "Expiry",
    "Headroom",
    "Ledger",
    "ManualClock",
    "NO_HEADROOM",
    "MonotonicClock",
    "PolicyStatistics",
    "Priority",
    "QuotaLimits",
    "QuotaPolicy",
    "QuotaScheduler",
    "QuotaState",
    "Seat",
    "SeatTaken",
    "Ticket",
    "TicketTooLarge",
]
