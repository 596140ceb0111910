"""Backends implementing :class:`oam_actors.agent.LanguageModel`.

Subpackages are imported by name on first use so that ``import oam_actors`` stays light:
:mod:`.pool` (the Nano device pool), :mod:`.proxy` (provider APIs), :mod:`.scheduler`,
:mod:`.device`, :mod:`.routing` (a router over several backends: route files, spill, budgets), and
:mod:`.setup` (the system model a server runs, from a :class:`ModelConfig`).
"""

from ._statistics import ModelWithStatistics, SupportsAdmissionWait, SupportsQuotaState, SupportsStatistics
from .scripted import ScriptCall, ScriptedModel, ScriptStep, ScriptStyle

__all__ = [
    "ModelWithStatistics",
    "ScriptCall",
    "ScriptStep",
    "ScriptStyle",
    "ScriptedModel",
    "SupportsAdmissionWait",
    "SupportsQuotaState",
    "SupportsStatistics",
]
