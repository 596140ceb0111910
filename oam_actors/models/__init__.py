"""Backends implementing :class:`oam_actors.agent.LanguageModel`.

Subpackages are imported by name on first use so that ``import oam_actors`` stays light.
"""

from .scripted import ScriptCall, ScriptedModel, ScriptStep, ScriptStyle

__all__ = ["ScriptCall", "ScriptStep", "ScriptStyle", "ScriptedModel"]
