"""``model/status``: a model's availability and its statistics, as a bridge extension.

Any program embedding a :class:`~oam_actors.bridge.Bridge` can add it for a model that reports
statistics (:class:`~oam_actors.models.ModelWithStatistics`: a device pool, a scheduled proxy,
a model hosted on Ray)::

    pool = ...  # a running DevicePool, shared by every bridge
    Bridge(system, write, system_model=lambda: pool, extensions=[ModelStatusExtension(lambda: pool)])

The result is ``{"availability": <model/availability result>, "statistics": <the model's
statistics record, camelCase>}``; see ``protocol/PROTOCOL.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ..models import ModelWithStatistics
from .registry import Call, Extension

if TYPE_CHECKING:
    from ..models.setup import ModelSetup
    from .registry import HandlerBridge

__all__ = ["ModelStatusExtension", "model_extensions", "model_status"]


class ModelStatusExtension:
    """``model/status`` for the model ``model`` returns (called per request, so a model that
    starts after the bridge is found). Install one per bridge."""

    def __init__(self, model: Callable[[], ModelWithStatistics]) -> None:
        self._model = model

    def install(self, bridge: HandlerBridge) -> None:
        bridge.registry.register("model/status", self._status)

    async def _status(self, call: Call) -> dict[str, Any]:
        return await model_status(self._model())

    async def aclose(self) -> None:
        return None


async def model_status(model: ModelWithStatistics) -> dict[str, Any]:
    """The result of ``model/status`` for ``model`` (the console shows the same)."""
    statistics = await model.statistics()
    return {
        "availability": (await model.availability()).to_wire(),
        "statistics": msgspec.to_builtins(statistics),
    }


def model_extensions(setup: ModelSetup) -> list[Extension]:
    """Fresh extensions for one bridge serving ``setup``'s models: ``model/status`` when its
    system model reports on itself (a device pool), else none."""
    return [] if setup.status_model is None else [ModelStatusExtension(setup.status_model)]
