"""What a device failure means for the pool, and each device's health (pure: ``now`` is passed in).

A failure is one of five :class:`Fault` classes. Quota refusals and transient failures are the
device's problem: the step is rerouted. Unreachable or unavailable devices are marked dead until a
probe finds them serving again. A request the model itself rejects (safety, too large, invalid)
would fail on every phone, so it reaches the caller and says nothing about the device.
"""

from __future__ import annotations

import enum
import math

import msgspec

from ...errors import ErrorCode
from ..device import DeviceError, FailureKind, MlKitCode, agent_code_for, is_quota_code

__all__ = ["DeviceState", "Fault", "Health", "HealthView", "cause_of", "classify"]


class Fault(enum.Enum):
    QUOTA = "quota"              # BUSY, battery or background quota, HTTP 429/503: cool down, reroute
    TRANSIENT = "transient"      # timeout, broken stream, garbage, unknown ML Kit error: reroute
    UNREACHABLE = "unreachable"  # no connection: dead until a probe succeeds
    UNAVAILABLE = "unavailable"  # the phone cannot run the model (or refuses us): dead until probed
    REQUEST = "request"          # the request's own fault: surfaced, the device is fine


class DeviceState(enum.StrEnum):
    READY = "ready"
    COOLING = "cooling"  # refusing for a while (quota, background, a transient failure)
    DEAD = "dead"        # unreachable or unable to serve; probed in the background


_TRANSPORT = {
    FailureKind.UNREACHABLE: Fault.UNREACHABLE,
    FailureKind.TIMEOUT: Fault.TRANSIENT,
    FailureKind.DISCONNECTED: Fault.TRANSIENT,
    FailureKind.MALFORMED: Fault.TRANSIENT,
}
_BY_AGENT_CODE = {
    ErrorCode.MODEL_UNAVAILABLE: Fault.UNAVAILABLE,
    ErrorCode.GENERATION_FAILED: Fault.TRANSIENT,
    ErrorCode.CANCELLED: Fault.TRANSIENT,  # ML Kit dropped the job; we did not ask it to
}


def classify(error: DeviceError) -> Fault:
    """The fault class of one failed device call."""
    if error.kind in _TRANSPORT:
        return _TRANSPORT[error.kind]
    if error.kind is FailureKind.MLKIT and error.mlkit_code is not None:
        if is_quota_code(error.mlkit_code):
            return Fault.QUOTA
        return _BY_AGENT_CODE.get(agent_code_for(error.mlkit_code), Fault.REQUEST)
    return _rejected(error.http_status)


def _rejected(status: int | None) -> Fault:
    """An HTTP refusal without an ML Kit code (the app, or a proxy in front of it)."""
    if status in (429, 503):
        return Fault.QUOTA
    if status in (401, 403, 404):
        return Fault.UNAVAILABLE  # wrong token or not the companion app: no request will succeed
    if status is not None and 400 <= status < 500:
        return Fault.REQUEST
    return Fault.TRANSIENT


def cause_of(error: DeviceError) -> str:
    """A short readable cause for status displays: ``BUSY (9)``, ``timeout``, ``HTTP 401``."""
    if error.mlkit_code is not None:
        try:
            return f"{MlKitCode(error.mlkit_code).name} ({error.mlkit_code})"
        except ValueError:
            return f"ML Kit code {error.mlkit_code}"
    if error.kind is FailureKind.REJECTED and error.http_status is not None:
        return f"HTTP {error.http_status}"
    return error.kind.value


class HealthView(msgspec.Struct, frozen=True):
    state: DeviceState
    reason: str | None
    cooling_for: float | None  # seconds left, when cooling


class Health:
    """One device's health. Cool-downs end by themselves; death ends only by :meth:`revive`."""

    def __init__(self, dead_after_failures: int) -> None:
        self._dead_after = dead_after_failures
        self._dead = False
        self._cool_until = -math.inf
        self._reason: str | None = None
        self._waiting_for_foreground = False
        self.failures = 0  # consecutive transport failures

    def state(self, now: float) -> DeviceState:
        if self._dead:
            return DeviceState.DEAD
        return DeviceState.COOLING if now < self._cool_until else DeviceState.READY

    @property
    def cool_until(self) -> float:
        return self._cool_until

    @property
    def needs_probe(self) -> bool:
        """Dead, or blocked in the background: only the availability endpoint can tell when it ends."""
        return self._dead or self._waiting_for_foreground

    def view(self, now: float) -> HealthView:
        state = self.state(now)
        return HealthView(state, self._reason if state is not DeviceState.READY else None,
                          self._cool_until - now if state is DeviceState.COOLING else None)

    def succeeded(self) -> None:
        self.failures = 0

    def cool_down(self, now: float, seconds: float, reason: str, *, background: bool = False) -> None:
        """Refuse work until ``now + seconds`` (a later cool-down already running wins)."""
        self._cool_until = max(self._cool_until, now + seconds)
        self._reason = reason
        self._waiting_for_foreground = background

    def transient_failure(self, now: float, cooldown: float, reason: str) -> None:
        self.failures += 1
        if self.failures >= self._dead_after:
            self.kill(f"{reason} ({self.failures} failures in a row)")
        else:
            self.cool_down(now, cooldown, reason)

    def kill(self, reason: str) -> None:
        self._dead = True
        self._reason = reason

    def revive(self) -> None:
        """A probe found the phone available and in the foreground."""
        self._dead = False
        self._waiting_for_foreground = False
        self._cool_until = -math.inf
        self._reason = None
        self.failures = 0
