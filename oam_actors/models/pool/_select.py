"""Which device takes the next step (pure)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ._health import DeviceState

__all__ = ["Candidate", "choose"]


class Candidate(msgspec.Struct, frozen=True):
    """One device as the chooser sees it."""

    index: int
    state: DeviceState
    cool_until: float
    load: int  # steps that would start there before this one, plus steps running
    room: int | None  # admissions left in its quota window; None when unlimited
    tried: bool = False  # this step already failed there
    frees_in: float = 0.0  # with no room: seconds until its window could admit the step (a dialogue step's)


def choose(candidates: Sequence[Candidate], turn: int = 0, home: int | None = None) -> int | None:
    """The index of the device for a step, or ``None`` when every device is dead.

    Devices the step has not failed on come first. Among those, a ready device beats a cooling
    one; ready devices with room left in their quota window beat full ones, then the least loaded
    wins; among full ones, the one whose window frees soonest (``frees_in``), then the least
    loaded; cooling devices are ranked by when they cool off. ``turn`` rotates ties so that equal
    devices share the work.

    ``home`` is the device the step's owner used last. It keeps the step when it is ready, has
    room if the best has (or, all full, frees as soon), and is not much busier than the best: one
    owner's steps then meet in one fair queue (fairness across owners holds per device) and reuse
    the phone's prefix cache.
    """
    alive = [c for c in candidates if c.state is not DeviceState.DEAD]
    if not alive:
        return None
    fresh = [c for c in alive if not c.tried] or alive
    ready = [c for c in fresh if c.state is DeviceState.READY]
    size = max(c.index for c in candidates) + 1

    def rotation(c: Candidate) -> int:
        return (c.index - turn) % size

    if not ready:
        return min(fresh, key=lambda c: (c.cool_until, c.load, rotation(c))).index
    best = min(ready, key=lambda c: (c.room == 0, c.frees_in if c.room == 0 else 0.0, c.load, -(c.room or 0),
                                     rotation(c)))
    stay = next((c for c in ready if c.index == home), None)
    roomy = stay is not None and (stay.room != 0 or best.room == 0 and stay.frees_in <= best.frees_in)
    if stay is not None and roomy and stay.load <= best.load + _slack(best.load):
        return stay.index
    return best.index


def _slack(load: int) -> int:
    """How much busier than the best an owner's home device may be and still keep its steps."""
    return max(2, load // 4)
