"""The router's pure decisions, beside the scheduler's policy: how long a tier may hold a step
before the next is tried, which backends are cooling down, and what may still be spent.

- :func:`spill_seconds`: a tier that is not the row's last may use ``share`` of the queue time
  the step has left; the last tier gets all of it.
- :class:`Cooldowns`: a backend that failed (not a quota refusal: a refusal only means it is
  full) is skipped for its cooldown.
- :class:`SpendLedger`: spend per cap key (``backend:NAME``, ``tenant:NAME``) over sliding
  windows. A step *reserves* its worst-case cost on every key it would charge before it is sent,
  and only if every cap still has room counting the reservations of steps in flight, so
  concurrent steps cannot overshoot a cap together; when the step ends the reservation is
  *settled* at the cost the backend's reported usage gives (or dropped, when nothing was spent).

No I/O, no clock: every call takes ``now``.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Sequence

__all__ = ["Cooldowns", "SpendLedger", "spill_seconds"]


def spill_seconds(left: float, share: float, *, last: bool) -> float:
    """How long a tier may hold a step that has ``left`` seconds of queue time."""
    return max(0.0, left if last else left * share)


class Cooldowns:
    """Backends skipped until a moment, after a failure."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}

    def cool(self, name: str, now: float, seconds: float) -> None:
        self._until[name] = max(self._until.get(name, 0.0), now + seconds)

    def cooling(self, name: str, now: float) -> bool:
        return self._until.get(name, 0.0) > now

    def left(self, name: str, now: float) -> float:
        """Seconds of cooldown left (0: usable)."""
        return max(0.0, self._until.get(name, 0.0) - now)


class _Window:
    """Settled spend of one key: ``(moment, amount)`` pairs kept for the longest window."""

    def __init__(self) -> None:
        self.spent: deque[tuple[float, float]] = deque()
        self.total = 0.0

    def within(self, seconds: float, now: float) -> float:
        since = now - seconds
        return sum(amount for moment, amount in self.spent if moment > since)


class SpendLedger:
    """Spend and reservations by key, checked against caps ``{key: [(window seconds, cap)]}``."""

    def __init__(self, caps: dict[str, Sequence[tuple[float, float]]]) -> None:
        self._caps = {key: list(items) for key, items in caps.items() if items}
        self._keep = max((seconds for items in self._caps.values() for seconds, _ in items), default=0.0)
        self._windows: dict[str, _Window] = {}
        self._reserved: dict[str, float] = {}
        self._holds: dict[int, tuple[tuple[str, ...], float]] = {}
        self._ids = itertools.count(1)

    def reserve(self, keys: Iterable[str], amount: float, now: float) -> int | None:
        """Hold ``amount`` on every key, if every capped key has room for it counting what is
        spent in each window and what steps in flight hold; the hold's id, or ``None`` (no room)."""
        held = tuple(keys)
        for key in held:
            for seconds, cap in self._caps.get(key, ()):
                if self.spent(key, now, seconds) + self._reserved.get(key, 0.0) + amount > cap + 1e-12:
                    return None
        for key in held:
            self._reserved[key] = self._reserved.get(key, 0.0) + amount
        hold = next(self._ids)
        self._holds[hold] = (held, amount)
        return hold

    def settle(self, hold: int, amount: float, now: float) -> None:
        """The step ended having cost ``amount`` (0: nothing was spent): charge it, drop the hold."""
        keys, reserved = self._holds.pop(hold)
        for key in keys:
            self._reserved[key] -= reserved
            if amount > 0:
                window = self._windows.setdefault(key, _Window())
                window.spent.append((now, amount))
                window.total += amount
                self._forget(window, now)

    def spent(self, key: str, now: float, seconds: float | None = None) -> float:
        """Spend settled on ``key`` within the last ``seconds`` (``None``: ever)."""
        window = self._windows.get(key)
        if window is None:
            return 0.0
        return window.total if seconds is None else window.within(seconds, now)

    def reserved(self, key: str) -> float:
        """What steps in flight hold on ``key``."""
        return max(0.0, self._reserved.get(key, 0.0))

    def caps(self, key: str) -> list[tuple[float, float]]:
        return list(self._caps.get(key, ()))

    def _forget(self, window: _Window, now: float) -> None:
        while window.spent and window.spent[0][0] <= now - self._keep:
            window.spent.popleft()
