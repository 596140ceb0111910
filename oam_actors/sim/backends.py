"""Backends a simulation can run on. Each tells the bridge which model sessions use and reports
its own counters (quota events, per-device utilisation) for the final report."""

from __future__ import annotations

import random
from typing import Any, Protocol

from ..bridge import ModelFactory
from .config import SimConfig

__all__ = ["Backend", "ScriptedBackend", "make_backend"]


class Backend(Protocol):
    name: str

    def system_model(self) -> ModelFactory | None:
        """The bridge's ``"system"`` model, or None when sessions name their own."""

    def session_model(self, index: int) -> Any:
        """The ``model`` param of session ``index`` (None = the system model)."""

    async def statistics(self) -> dict[str, Any]:
        """Backend counters for the report."""

    async def aclose(self) -> None: ...


class ScriptedBackend:
    """Scripted sessions with latency: every turn either calls one tool then answers, or answers."""

    name = "scripted"

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)

    def system_model(self) -> ModelFactory | None:
        return None

    def session_model(self, index: int) -> Any:
        turns = int(self.config.duration_seconds / max(0.05, self.config.think_seconds) * 2) + 10
        latency_ms = int(self.config.model_latency_seconds * 1000)
        steps: list[dict[str, Any]] = []
        for _ in range(turns):
            delay = self.rng.randint(latency_ms // 2, latency_ms * 3 // 2) if latency_ms else 0
            if self.rng.random() < 0.5:
                tool = self.rng.choice(["open_gate", "check_inventory"])
                arguments = {"gate": "north"} if tool == "open_gate" else {"item": "ale"}
                steps.append({"toolCalls": [{"name": tool, "arguments": arguments}], "delayMs": delay // 2})
                steps.append({"template": "Done: {toolOutput}", "delayMs": delay // 2})
            else:
                steps.append({"text": "Welcome, traveller. The road is quiet today.", "delayMs": delay})
        return {"type": "scripted", "steps": steps}

    async def statistics(self) -> dict[str, Any]:
        return {"backend": self.name}

    async def aclose(self) -> None:
        return None


def make_backend(config: SimConfig) -> Backend:
    if config.backend == "scripted":
        return ScriptedBackend(config)
    raise SystemExit(f"oam-actors simulate: backend {config.backend!r} is not available yet")
