"""Rate-limit facts from provider responses, handed to whoever schedules quota.

A :class:`~oam_actors.models.proxy.ProxyModel` keeps the latest :class:`RateLimitReport` as
``last_rate_limit`` and calls its ``on_rate_limit`` hook with every report (each response that
carries rate-limit headers, and every 429). :func:`scheduler_hook` is the hook that feeds a
:class:`~oam_actors.models.scheduler.QuotaScheduler`: a 429 cools it down, headers set its budget.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ..codecs import RateLimitInfo
from ..scheduler import QuotaScheduler

__all__ = ["RateLimitHook", "RateLimitReport", "scheduler_hook"]


class RateLimitReport(msgspec.Struct, frozen=True):
    """What one response said about quota: its HTTP status, the parsed headers, and for an error
    the seconds to wait (headers first, else the error body, e.g. Gemini's ``RetryInfo``)."""

    status: int
    info: RateLimitInfo
    retry_after: float | None = None

    @property
    def throttled(self) -> bool:
        """The provider refused this request for quota."""
        return self.status == 429

    @property
    def known(self) -> bool:
        """The headers said anything at all."""
        return self.info != RateLimitInfo() or self.retry_after is not None


RateLimitHook = Callable[[RateLimitReport], None]
"""Called synchronously, on the model's task, after each report; must not block."""


def scheduler_hook(scheduler: QuotaScheduler) -> RateLimitHook:
    """A hook that feeds ``scheduler``: headers → ``rate_limit_headers(…)`` with each window's
    limit and reset (the policy learns the provider's rate and window from them) and the latest
    reset as the budget's (the cautious reading); then a 429 → ``throttled(retry_after=…)``, the
    delay it asked for or else the reset its headers reported."""

    def feed(report: RateLimitReport) -> None:
        info = report.info
        requests, tokens = info.requests, info.tokens
        resets = [w.reset_after for w in (requests, tokens) if w.reset_after is not None]
        if resets:
            scheduler.rate_limit_headers(
                remaining_requests=requests.remaining,
                remaining_tokens=tokens.remaining,
                reset_seconds=max(resets),
                limit_requests=requests.limit,
                limit_tokens=tokens.limit,
                reset_requests=requests.reset_after,
                reset_tokens=tokens.reset_after,
            )
        if report.throttled:
            retry_after = report.retry_after if report.retry_after is not None else info.cool_down()
            scheduler.throttled(retry_after=retry_after)

    return feed
