"""Bridge configuration: limits, model factories, server identity."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ..agent import LanguageModel

__all__ = ["DEFAULT_MAX_CONNECTION_BYTES", "DEFAULT_MAX_IN_FLIGHT", "BridgeConfig", "CustomModelFactory", "ModelCheck", "ModelFactory"]

DEFAULT_MAX_CONNECTION_BYTES = 32 * 1024 * 1024
"""The memory bound of one connection that ``oam-actors serve`` and ``stdio`` apply by default."""

DEFAULT_MAX_IN_FLIGHT = 1024
"""The requests one connection may have in flight that ``serve`` and ``stdio`` apply by default."""

ModelFactory = Callable[[], LanguageModel]
"""Makes the model of a new ``"system"`` session (may return one shared instance)."""

CustomModelFactory = Callable[[dict[str, Any], str], LanguageModel]
"""Makes a model for ``{"type": <name>, …}``; gets the model object and its param path; raises
``invalid_params`` for bad fields."""

ModelCheck = Callable[[dict[str, Any], str], Awaitable[None]]
"""Checks a ``{"type": <name>, …}`` object before a create builds its model, where that needs I/O
(resolving a host to refuse private addresses); raises ``invalid_params`` naming the field. An
object revived from a state store was checked when it was created and is not checked again."""


class BridgeConfig(msgspec.Struct, kw_only=True):
    """Limits and identity of a bridge. Defaults follow the Android bridge.

    ``max_connection_bytes`` bounds what the connection holds (pending output, requests in flight,
    buffered input; see ``Bridge``), ``max_in_flight`` the requests it may have in flight; ``None``
    (the default for an embedded bridge) is no bound. The command-line servers apply
    :data:`DEFAULT_MAX_CONNECTION_BYTES` and :data:`DEFAULT_MAX_IN_FLIGHT`.
    """

    max_sessions: int = 64
    scripted_models: bool = True
    default_tool_timeout: float = 120.0
    max_queue: int = 1024
    max_connection_bytes: int | None = None
    max_in_flight: int | None = None
    shutdown_grace_seconds: float = 2.0
    server_name: str = "oam-actors"
    server_version: str = "0.1.0"
    model_types: dict[str, CustomModelFactory] = msgspec.field(default_factory=dict)
    model_checks: dict[str, ModelCheck] = msgspec.field(default_factory=dict)
