"""The Nano device backend: one Android phone running the companion app, over HTTP.

- :mod:`.protocol` — the wire shapes of ``protocol/DEVICE.md`` and the ML Kit code table (pure).
- :class:`DeviceModel` — a :class:`~oam_actors.agent.LanguageModel` for one phone.
- :class:`SimulatedPhone` — a phone simulator speaking the same protocol, for demos and tests;
  its deterministic "model" is :mod:`.responder`.

Importing this package does not start anything; the simulator's server runs only inside
``async with SimulatedPhone(...)``.
"""

from .client import DeviceError, DeviceModel, DeviceTimeouts, FailureKind
from .protocol import MlKitCode, agent_code_for, is_quota_code
from .simulator import ManualClock, PhoneConfig, PhoneStatistics, SimulatedPhone

__all__ = [
    "DeviceError",
    "DeviceModel",
    "DeviceTimeouts",
    "FailureKind",
    "ManualClock",
    "MlKitCode",
    "PhoneConfig",
    "PhoneStatistics",
    "SimulatedPhone",
    "agent_code_for",
    "is_quota_code",
]
