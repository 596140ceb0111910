"""Bridge configuration: limits, model factories, server identity."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ..agent import LanguageModel

__all__ = ["BridgeConfig", "ModelFactory", "CustomModelFactory"]

ModelFactory = Callable[[], LanguageModel]
"""Makes the model of a new ``"system"`` session (may return one shared instance)."""

CustomModelFactory = Callable[[dict[str, Any], str], LanguageModel]
"""Makes a model for ``{"type": <name>, …}``; gets the model object and its param path; raises
``invalid_params`` for bad fields."""


class BridgeConfig(msgspec.Struct, kw_only=True):
    """Limits and identity of a bridge. Defaults follow the Android bridge."""

    max_sessions: int = 64
    scripted_models: bool = True
    default_tool_timeout: float = 120.0
    max_queue: int = 1024
    shutdown_grace_seconds: float = 2.0
    server_name: str = "oam-actors"
    server_version: str = "0.1.0"
    model_types: dict[str, CustomModelFactory] = msgspec.field(default_factory=dict)
