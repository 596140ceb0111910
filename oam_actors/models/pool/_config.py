"""The pool's settings and their start-up checks (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

import msgspec

from ...agent.model import GenerationRequest
from ...errors import DeadlinePassed
from ..device import DeviceTimeouts
from ..scheduler import Priority, QuotaLimits

__all__ = [
    "NANO_QUOTA",
    "NANO_WINDOW_SECONDS",
    "PoolConfig",
    "PoolConfigError",
    "canonical_urls",
    "nano_limits",
    "normalize_urls",
    "priority_of",
    "queue_limit",
    "queue_times",
    "scaled_config",
]

DEFAULT_QUEUE_SECONDS = (20.0, 60.0, 120.0)  # how long a step may wait for quota, by priority
NANO_QUOTA = 36  # generations per rolling window before BUSY (a Pixel manages 36-41)
NANO_WINDOW_SECONDS = 60.0
# The phone records a generation a little after the pool admits it, so its window frees a little
# later than ours: a window this much longer keeps the two from disagreeing into a BUSY.
WINDOW_MARGIN = 0.02


class PoolConfigError(ValueError):
    """The pool cannot start as configured (no devices, duplicate URLs, impossible limits)."""


def nano_limits(time_scale: float = 1.0) -> QuotaLimits:
    """One Nano phone's quota in real seconds: 36 per rolling 60 s, paced one a second, one at a
    time. ``time_scale`` is real seconds per phone second (a simulated farm runs faster)."""
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise PoolConfigError(f"time_scale must be a positive number; got {time_scale}")
    return QuotaLimits(
        window_seconds=NANO_WINDOW_SECONDS * (1 + WINDOW_MARGIN) * time_scale,
        requests_per_window=NANO_QUOTA,
        max_concurrency=1,
        min_interval_seconds=1.0 * time_scale,
        backoff_seconds=1.0 * time_scale,
        max_backoff_seconds=NANO_WINDOW_SECONDS * time_scale,
    )


class PoolConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How the pool schedules, fails over and probes. Durations are real seconds.

    ``queue_seconds`` is how long a step may wait for a device, by priority (dialogue, decision,
    background); past it the step fails ``rate_limited`` with ``retryAfter``.
    """

    limits: QuotaLimits = nano_limits()
    queue_seconds: tuple[float, float, float] = DEFAULT_QUEUE_SECONDS
    max_attempts: int = 3  # devices tried for one step on failures that are not quota refusals
    dead_after_failures: int = 3  # consecutive transport failures that mark a device dead
    transient_cooldown_seconds: float = 1.0
    background_cooldown_seconds: float = 10.0  # after 30 BACKGROUND_USE_BLOCKED (no retry delay)
    probe_interval_seconds: float = 5.0
    probe_timeout_seconds: float = 5.0
    timeouts: DeviceTimeouts = DeviceTimeouts()
    token: str | None = None

    def __post_init__(self) -> None:
        if len(self.queue_seconds) != len(Priority) or not all(_positive(s) for s in self.queue_seconds):
            raise PoolConfigError(f"queue_seconds needs {len(Priority)} positive numbers; got {self.queue_seconds}")
        if self.max_attempts < 1 or self.dead_after_failures < 1:
            raise PoolConfigError("max_attempts and dead_after_failures must be at least 1")
        for name in ("transient_cooldown_seconds", "background_cooldown_seconds", "probe_interval_seconds",
                     "probe_timeout_seconds"):
            if not _positive(getattr(self, name)):
                raise PoolConfigError(f"{name} must be a positive number of seconds")

    def queue_deadline(self, priority: Priority) -> float:
        return self.queue_seconds[priority]


def scaled_config(time_scale: float, **overrides: object) -> PoolConfig:
    """A pool config for phones running ``time_scale`` real seconds per phone second (a simulated
    farm): the quota, cool-downs and probes follow the phones' clock; queue times (what clients
    wait) and HTTP timeouts stay real."""
    fields: dict[str, object] = {
        "limits": nano_limits(time_scale),
        "transient_cooldown_seconds": 1.0 * time_scale,
        "background_cooldown_seconds": 10.0 * time_scale,
        # Probing costs real work, however fast the phones' clock runs.
        "probe_interval_seconds": max(1.0, 5.0 * time_scale),
        **overrides,
    }
    return PoolConfig(**fields)  # type: ignore[arg-type]


def priority_of(hint: str) -> Priority:
    """The scheduling class of a request's ``priority`` hint (unknown hints count as dialogue)."""
    return Priority.__members__.get(hint.upper(), Priority.DIALOGUE)


def queue_times(overrides: Iterable[tuple[str, float]] = ()) -> tuple[float, float, float]:
    """Queue times (the server's default deadlines) by priority: the defaults, with
    ``(priority name, seconds)`` pairs (``("background", 10.0)``) put over them."""
    chosen = dict(zip(Priority, DEFAULT_QUEUE_SECONDS, strict=True))
    for name, seconds in overrides:
        chosen[priority_of(name)] = seconds
    dialogue, decision, background = (chosen[p] for p in Priority)
    return dialogue, decision, background


def queue_limit(configured: float, request: GenerationRequest) -> float:
    """How long ``request``'s step may queue from now: the configured time, or the request's own
    (:meth:`~GenerationRequest.queue_left`) when shorter. Both count from the request's arrival
    (0: none is left), except that a later step of a turn (after a tool round, whose time is the
    client's, not a queue's) has the configured time afresh."""
    limit = configured if request.follow_up else configured - request.waited()
    own = request.queue_left()
    return max(0.0, limit if own is None else min(limit, own))


def spent_before_the_model() -> DeadlinePassed:
    """A step whose :func:`queue_limit` is 0: its request's deadline passed before it reached the
    model, so it degrades at once rather than queue (the quota is not what ran out: retry now)."""
    return DeadlinePassed("The request's deadline passed before its step reached the model.", retry_after=0.0)


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def normalize_urls(urls: Sequence[str]) -> list[str]:
    """The device base URLs, checked: at least one, each ``http(s)://host[:port]``, no duplicates
    (``http://127.0.0.1:8765/`` and ``HTTP://127.0.0.1:8765`` are the same phone)."""
    if not urls:
        raise PoolConfigError("a device pool needs at least one device URL")
    seen: dict[str, str] = {}
    result = []
    for url in urls:
        key = _url_key(url)
        if key in seen:
            raise PoolConfigError(f"device URL {url!r} is listed twice (as {seen[key]!r})")
        seen[key] = url
        result.append(url.strip().rstrip("/"))
    return result


def canonical_urls(urls: Sequence[str]) -> tuple[str, ...]:
    """The device URLs checked as :func:`normalize_urls` does, each in one spelling (lower-case
    scheme and host, the port written out), sorted: the same phones give the same tuple."""
    return tuple(sorted(_url_key(url) for url in normalize_urls(urls)))


def _url_key(url: str) -> str:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as error:
        raise PoolConfigError(f"device URL {url!r} is not a valid URL: {error}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise PoolConfigError(f"device URL {url!r} must look like http://HOST:PORT")
    if parts.query or parts.fragment:
        raise PoolConfigError(f"device URL {url!r} must not carry a query or fragment")
    scheme = parts.scheme.lower()
    port = port or (443 if scheme == "https" else 80)
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"
