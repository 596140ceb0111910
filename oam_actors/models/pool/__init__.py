"""The Nano device pool: one :class:`~oam_actors.agent.LanguageModel` over N phones.

Contract
--------
- ``async with DevicePool(urls, config=PoolConfig(…)) as pool:`` probes every phone, then keeps
  probing in the background every ``probe_interval_seconds``. Use one pool per process, shared by
  every session and NPC (the bridge's system model factory returns the same instance), so each
  phone's quota is enforced once. Enter and exit it in the same task.
- Each phone has its own :class:`~oam_actors.models.scheduler.QuotaScheduler` (Nano: 36 per
  rolling 60 s, one a second, one at a time — :func:`nano_limits`). A step queues by
  ``request.owner`` (fair queuing) and ``request.priority`` (dialogue before decisions before
  background) on the best device: ready before cooling, room in its quota window, least loaded
  (a dialogue step that finds every window full: the one that frees first).
- A step refused for quota (BUSY 9, battery 27/28, background 30, HTTP 429/503) cools that phone
  down and goes to another (or waits out the shortest cool-down) until its queue time is used up;
  then it fails ``rate_limited`` with ``retryAfter``. Transport failures, garbage and unknown
  ML Kit errors reroute up to ``max_attempts`` devices; unreachable or unavailable phones are
  marked dead and probed back. Nothing is rerouted once text has streamed to the agent: the step
  fails and the agent's own per-step retry decides. A model step may run again; a tool never
  does, because tools run only on the text of a finished step. Refusals of the request itself
  (safety, too large, invalid) reach the caller at once.
- Cancelling a step that waits for a device removes it from the queue at once.
- ``availability()`` (no I/O) is available when any live device is, with the smallest context;
  ``await statistics()`` (as on every model, :class:`~oam_actors.models.SupportsStatistics`)
  and ``statistics_nowait()`` are a frozen :class:`PoolStatistics` (camelCase on the wire) for
  ``model/status``.
- Start-up errors (no devices, duplicate or malformed URLs, impossible settings) raise
  :class:`PoolConfigError`; unreachable phones are logged and served around.
- Inputs and outputs are msgspec Structs, so a runtime can host the pool as a named actor.

:class:`SimulatedFarm` runs simulated phones on loopback; :class:`ScheduledModel` puts any other
backend (a proxy) behind one scheduler.
"""

from ._config import (
    NANO_QUOTA,
    NANO_WINDOW_SECONDS,
    PoolConfig,
    PoolConfigError,
    canonical_urls,
    nano_limits,
    normalize_urls,
    priority_of,
    queue_times,
    scaled_config,
)
from ._farm import DEMO_TIME_SCALE, SimulatedFarm, farm_phone_config
from ._gate import ScheduledModel
from ._health import DeviceState, Fault, classify
from ._pool import DevicePool
from ._select import Candidate, choose
from ._status import DeviceStatistics, PoolStatistics, WaitSummary, pool_availability

__all__ = [
    "DEMO_TIME_SCALE",
    "NANO_QUOTA",
    "NANO_WINDOW_SECONDS",
    "Candidate",
    "DevicePool",
    "DeviceState",
    "DeviceStatistics",
    "Fault",
    "PoolConfig",
    "PoolConfigError",
    "PoolStatistics",
    "ScheduledModel",
    "SimulatedFarm",
    "WaitSummary",
    "canonical_urls",
    "choose",
    "classify",
    "farm_phone_config",
    "nano_limits",
    "normalize_urls",
    "pool_availability",
    "priority_of",
    "queue_times",
    "scaled_config",
]
