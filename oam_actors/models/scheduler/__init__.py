"""QuotaScheduler: quota-aware admission in front of every model backend.

:mod:`.policy` is the pure decision logic (token windows, concurrency, pacing, cool-downs, AIMD
limits, strict priorities, fair queuing per owner, deadlines); :mod:`.scheduler` is the thin anyio
shell that backends wrap their calls in::

    scheduler = QuotaScheduler(QuotaLimits(requests_per_window=36, window_seconds=60,
                                           max_concurrency=1, min_interval_seconds=1.0))
    async with scheduler.admit("npc:gorm", Priority.DIALOGUE, deadline_seconds=20) as admission:
        ...  # call the backend; on BUSY / 429 call scheduler.throttled(retry_after=…)
"""

from .policy import (
    Decision,
    Expiry,
    PolicyStatistics,
    Priority,
    QuotaLimits,
    QuotaPolicy,
    Ticket,
    TicketTooLarge,
)
from .scheduler import Admission, Clock, ManualClock, MonotonicClock, QuotaScheduler

__all__ = [
    "Admission",
    "Clock",
    "Decision",
    "Expiry",
    "ManualClock",
    "MonotonicClock",
    "PolicyStatistics",
    "Priority",
    "QuotaLimits",
    "QuotaPolicy",
    "QuotaScheduler",
    "Ticket",
    "TicketTooLarge",
]
