"""Rate-limit and retry-after facts from provider response headers, for the quota scheduler.

Pure: the caller passes the headers (any mapping or list of pairs; names are case-insensitive)
and, for reproducible results, ``now`` (an aware UTC datetime; default: the current time).
All durations are seconds, clamped to ``0 … MAX_RETRY_AFTER``; unparsable values are ``None``.

Headers understood:

- ``retry-after-ms`` (OpenAI, Azure), then ``retry-after`` (delta-seconds, fractional allowed, or
  an HTTP-date);
- OpenAI ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; resets are Go-style durations
  (``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``);
- Anthropic ``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}``; resets are
  RFC 3339 instants.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import re
from collections.abc import Iterable, Mapping

import msgspec

__all__ = [
    "MAX_RETRY_AFTER",
    "Headers",
    "RateLimitInfo",
    "RateLimitWindow",
    "normalize_headers",
    "parse_duration",
    "parse_rate_limit_headers",
    "retry_after_from_headers",
]

MAX_RETRY_AFTER = 600.0

Headers = Mapping[str, str] | Iterable[tuple[str, str]]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


class RateLimitWindow(msgspec.Struct, frozen=True, kw_only=True):
    """One quota dimension: its limit, what remains, and seconds until it resets."""

    limit: int | None = None
    remaining: int | None = None
    reset_after: float | None = None

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0


class RateLimitInfo(msgspec.Struct, frozen=True, kw_only=True):
    requests: RateLimitWindow = RateLimitWindow()
    tokens: RateLimitWindow = RateLimitWindow()
    retry_after: float | None = None

    def cool_down(self) -> float | None:
        """How long to wait after a rate limit: ``retry_after`` if sent, else the latest reset of
        the exhausted windows (of any window when none is marked exhausted)."""
        if self.retry_after is not None:
            return self.retry_after
        windows = (self.requests, self.tokens)
        resets = [w.reset_after for w in windows if w.exhausted and w.reset_after is not None]
        resets = resets or [w.reset_after for w in windows if w.reset_after is not None]
        return max(resets) if resets else None


def normalize_headers(headers: Headers) -> dict[str, str]:
    """Lower-cased names; the last value of a repeated header wins."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {_text(name).lower(): _text(value).strip() for name, value in items}


def parse_rate_limit_headers(headers: Headers, *, now: dt.datetime | None = None) -> RateLimitInfo:
    """Everything the headers say about quotas, OpenAI and Anthropic style."""
    h = normalize_headers(headers)
    now = now or _utcnow()
    return RateLimitInfo(
        requests=_window(h, "requests", now),
        tokens=_window(h, "tokens", now),
        retry_after=_retry_after(h, now),
    )


def retry_after_from_headers(headers: Headers, *, now: dt.datetime | None = None) -> float | None:
    """``retry-after-ms``, else ``retry-after``; ``None`` when absent or unparsable."""
    return _retry_after(normalize_headers(headers), now or _utcnow())


def parse_duration(text: str) -> float | None:
    """Seconds in a Go/protobuf duration (``1m30s``, ``20ms``, ``13.5s``) or a bare number."""
    text = text.strip()
    number = _number(text)
    if number is not None:
        return number
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(v + u for v, u in parts) != text:
        return None
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(value) * scale[unit] for value, unit in parts)


def _retry_after(h: Mapping[str, str], now: dt.datetime) -> float | None:
    if "retry-after-ms" in h:
        ms = _number(h["retry-after-ms"])
        if ms is not None:
            return _clamp(ms / 1000.0)
    if "retry-after" in h:
        value = h["retry-after"]
        seconds = _number(value)
        if seconds is None:
            seconds = _seconds_until(_http_date(value), now)
        return _clamp(seconds) if seconds is not None else None
    return None


def _window(h: Mapping[str, str], dimension: str, now: dt.datetime) -> RateLimitWindow:
    openai = f"x-ratelimit-{{}}-{dimension}"
    anthropic = f"anthropic-ratelimit-{dimension}-{{}}"
    reset: float | None = None
    if openai.format("reset") in h:
        reset = parse_duration(h[openai.format("reset")])
    elif anthropic.format("reset") in h:
        reset = _seconds_until(_iso_instant(h[anthropic.format("reset")]), now)
    return RateLimitWindow(
        limit=_count(h.get(openai.format("limit")) or h.get(anthropic.format("limit"))),
        remaining=_count(h.get(openai.format("remaining")) or h.get(anthropic.format("remaining"))),
        reset_after=_clamp(reset) if reset is not None else None,
    )


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _count(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _http_date(text: str) -> dt.datetime | None:
    try:
        return email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None


def _iso_instant(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def _seconds_until(instant: dt.datetime | None, now: dt.datetime) -> float | None:
    if instant is None:
        return None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=dt.UTC)
    return max(0.0, (instant - now).total_seconds())


def _clamp(seconds: float) -> float:
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value
