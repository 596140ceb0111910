"""Ambient conversations in ``oam-actors simulate``: groups of the crowd's NPCs talk among
themselves (``conversation/*``, no player) while they also talk with players, decide and bark.

Each conversation loops until the deadline: ``conversation/advance`` one line with a
``deadlineSeconds`` (background priority: a line the quota cannot take in time is the speaker's
fallback line, ``degraded``), then a pause. :class:`AmbientLog` keeps the figures and the opening
lines of every conversation; the report's excerpt is the opening the model answered most of (in a
crowd offered beyond its quota, or with players talking to the members, most openings are mostly
fallback lines, which show nothing of what the conversations sound like).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..client import Client
from ..errors import OamError
from .config import SimConfig

__all__ = ["EXCERPT_LINES", "AmbientLog", "converse_ambient", "create_conversations"]

EXCERPT_LINES = 12
SETTINGS = ("Gossip by the well.", "A quarrel about the price of grain.", "Waiting out the rain under the inn's porch.")


@dataclass
class AmbientLog:
    conversations: int = 0
    members: int = 0
    requests: int = 0
    lines: int = 0
    degraded: int = 0
    degraded_by: dict[str, int] = field(default_factory=dict)  # "deadline", "preempted" (by a player's talk)
    fallback: int = 0  # a fallback line for another reason (an unusable or misattributed answer)
    failed: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    openings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by conversation, EXCERPT_LINES at most

    def record(self, result: dict[str, Any], latency: float, conversation: str) -> None:
        self.requests += 1
        self.latencies.append(latency)
        opening = self.openings.setdefault(conversation, [])
        for line in result.get("lines", []):
            self.lines += 1
            if (why := line.get("degraded")) is not None:
                self.degraded += 1
                self.degraded_by[why] = self.degraded_by.get(why, 0) + 1
            elif line.get("isFallback"):
                self.fallback += 1
            if len(opening) < EXCERPT_LINES:
                opening.append({k: line.get(k) for k in ("name", "line", "addressee", "degraded", "isFallback")})

    def excerpt(self) -> tuple[str | None, list[dict[str, Any]]]:
        """The conversation whose opening has the most lines the model answered (the first such),
        and that opening."""
        if not self.openings:
            return None, []
        conversation = max(self.openings, key=lambda c: sum(not e["isFallback"] for e in self.openings[c]))
        return conversation, self.openings[conversation]


async def create_conversations(client: Client, config: SimConfig, npcs: list[str],
                               log: AmbientLog) -> list[str]:
    """``config.conversation_count`` conversations of ``config.conversation_size`` of ``npcs``
    each (distinct members), on the shared world ``village``."""
    size = config.conversation_size
    conversations = []
    for index in range(min(config.conversation_count, len(npcs) // size)):
        members = npcs[index * size:(index + 1) * size]
        conversation = f"ambient{index + 1}"
        await client.call("conversation/create", {
            "conversation": conversation, "world": "village", "members": members, "turnOrder": "model",
            "situation": SETTINGS[index % len(SETTINGS)], "lineBudget": 10_000,
        })
        conversations.append(conversation)
        log.members += len(members)
    log.conversations = len(conversations)
    return conversations


async def converse_ambient(client: Client, config: SimConfig, log: AmbientLog, conversation: str,
                           deadline: float, rng: random.Random) -> None:
    """One line at a time until ``deadline``, a pause (``think_seconds`` on average) between."""
    await anyio.sleep(rng.random() * config.think_seconds)
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            result = await client.call("conversation/advance", {
                "conversation": conversation, "deadlineSeconds": config.conversation_deadline_seconds})
            log.record(result, time.monotonic() - started, conversation)
        except OamError as error:
            log.failed[error.code.wire] = log.failed.get(error.code.wire, 0) + 1
        pause = rng.expovariate(1 / config.think_seconds) if config.think_seconds > 0 else 0.0
        await anyio.sleep(max(0.0, min(pause, deadline - time.monotonic())))
