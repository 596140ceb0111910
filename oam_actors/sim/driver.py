"""The load generator of ``oam-actors simulate``: conversations driven through a real bridge.

Every conversation is one owner (a session, or an NPC on the shared world ``village``) that loops
until the deadline: send a request, wait for the answer, pause. A session sends a player line
(``session/respond``); an NPC's action is, by ``npc_mix``, a player line (``npc/talk``), a
decision (``decision/decide`` with a ``fallbackOptionID``) or a bark (``npc/bark`` with a
``deadlineSeconds``); each NPC has ``fallbackLines``, so a bark or talk the quota cannot take in
time degrades instead of failing. Groups of the NPCs also talk among themselves in ambient
conversations (:mod:`.conversations`), beside their own actions. The simulated game engine answers ``tool/call`` requests — except a configurable share it
leaves unanswered to exercise tool timeouts — and a configurable share of turns is cancelled while
in flight. After the deadline no turn starts and the turns in flight finish; a ``stop`` event ends
the run at once instead (Ctrl-C), keeping what completed.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..client import Client
from ..errors import OamError
from .backends import Backend
from .config import SimConfig
from .conversations import AmbientLog, converse_ambient, create_conversations
from .stats import FALLBACK, OK, Outcomes

__all__ = ["ACTIONS", "BARK", "DECIDE", "PRIORITY_OF", "SESSION", "TALK", "Conversation", "SimRun", "Talker",
           "TurnSample", "run_simulation"]

PLAYER_LINES = (
    "Open the north gate, please.",
    "What do you have for sale?",
    "Have you seen the blacksmith today?",
    "I need two ales and a stew.",
    "Tell me about the old mine.",
    "Can you check whether the bridge is safe?",
    "Good morning! Any news from the capital?",
    "I'd like to rent a room for the night.",
)

TOOLS = [
    {
        "name": "open_gate",
        "description": "Ask the game to open a gate.",
        "parameters": {"type": "object", "properties": {"gate": {"type": "string", "enum": ["north", "south"]}}, "required": ["gate"]},
    },
    {
        "name": "check_inventory",
        "description": "Look up what the shop has in stock.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": []},
    },
]


ROLES = ("the village blacksmith", "the innkeeper", "a gate guard", "the herbalist", "a travelling merchant")


SESSION, TALK, DECIDE, BARK = "session", "talk", "decide", "bark"
ACTIONS = (TALK, DECIDE, BARK)
PRIORITY_OF = {SESSION: "dialogue", TALK: "dialogue", DECIDE: "decision", BARK: "background"}
"""The quota scheduler's priority of each kind of request."""
SITUATIONS = ("A cart rattles past.", "It starts to rain.", "The church bell rings.", "A dog barks at a stranger.")
FALLBACK_LINES = ("Busy day, this.", "Mind how you go.", "Can't stop, sorry.")
"""Every NPC's ``fallbackLines``, as a game writes them: what it says when the quota has no room
in time for a talk or for a bark with no recent bark to repeat."""
CHOICES = [{"id": "work", "description": "Get back to work."}, {"id": "rest", "description": "Take a break."},
           {"id": "gossip", "description": "Tell a neighbour the news."}]


@dataclass(frozen=True)
class Talker:
    """One conversation partner: a session or an NPC."""

    owner: str
    kind: str  # "session" or "npc"
    decision_model: Any = None  # the ``model`` param of its decisions (None: the system model)

    @property
    def talk_method(self) -> str:
        return "session/respond" if self.kind == "session" else "npc/talk"

    def talk_params(self, line: str) -> dict[str, Any]:
        if self.kind == "session":
            return {"session": self.owner, "prompt": line}
        return {"npc": self.owner, "line": line}

    @property
    def cancel_method(self) -> str:
        return f"{self.kind}/cancel"

    def action(self, rng: random.Random, config: SimConfig) -> tuple[str, str, dict[str, Any]]:
        """The next request: its kind (:data:`SESSION` or one of :data:`ACTIONS` by
        ``config.npc_mix``), method and params."""
        if self.kind == "session":
            return SESSION, self.talk_method, self.talk_params(rng.choice(PLAYER_LINES))
        kind = rng.choices(ACTIONS, weights=config.npc_mix)[0]
        if kind == DECIDE:
            params = {"situation": rng.choice(SITUATIONS), "options": CHOICES, "actor": self.owner,
                      "fallbackOptionID": "work"}
            if self.decision_model is not None:
                params["model"] = self.decision_model
            return kind, "decision/decide", params
        if kind == BARK:
            return kind, "npc/bark", {"npc": self.owner, "situation": rng.choice(SITUATIONS),
                                      "deadlineSeconds": config.bark_deadline_seconds}
        return kind, self.talk_method, self.talk_params(rng.choice(PLAYER_LINES))


@dataclass(frozen=True)
class TurnSample:
    owner: str
    started: float
    latency: float
    outcome: str  # OK, FALLBACK (an NPC's canned line), or the error's data.code (CANCELLED, …)
    tool_calls: int = 0
    tool_errors: int = 0
    kind: str = SESSION  # SESSION, TALK, DECIDE or BARK
    degraded: bool = False  # a fallback because the deadline passed (``degraded: "deadline"``)
    repeated: bool = False  # that fallback is a recent bark said again (``repeated: true``), not a fallbackLines line


@dataclass
class Conversation:
    owner: str
    turns_ok: int = 0
    turns_failed: int = 0


@dataclass
class SimRun:
    """Everything measured during one run; the report is computed from it.

    Times are ``time.monotonic()`` readings, except ``load_started`` / ``load_ended``, which are
    seconds since ``started`` (None until that phase begins)."""

    config: SimConfig
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    load_started: float | None = None
    """The conversations exist and the first turns go out."""
    load_ended: float | None = None
    """No new turns from here on: the deadline passed, or the run was interrupted."""
    interrupted: bool = False
    """Stopped early (``stop`` was set)."""
    abandoned: int = 0
    """Turns in flight when the run was interrupted: not waited for, not counted as samples."""
    samples: list[TurnSample] = field(default_factory=list)
    outcomes: Outcomes = field(default_factory=Outcomes)
    conversations: dict[str, Conversation] = field(default_factory=dict)
    in_flight: int = 0
    tool_calls_answered: int = 0
    tool_calls_ignored: int = 0
    cancels_sent: int = 0
    backend_stats: dict[str, Any] = field(default_factory=dict)
    backend_at_load_end: dict[str, Any] = field(default_factory=dict)
    """The backend's counters when the load ended (before the turns in flight drained)."""
    ambient: AmbientLog = field(default_factory=AmbientLog)
    """Ambient conversations among the NPCs (``sim.conversations``)."""

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def record(self, sample: TurnSample) -> None:
        self.samples.append(sample)
        self.outcomes.add(sample.outcome)
        conversation = self.conversations[sample.owner]
        if sample.outcome == OK:
            conversation.turns_ok += 1
        else:
            conversation.turns_failed += 1


async def run_simulation(
    config: SimConfig,
    backend: Backend,
    make_client: Callable[[], AbstractAsyncContextManager[Client]],
    *,
    on_tick: Callable[[SimRun], None] | None = None,
    stop: anyio.Event | None = None,
) -> SimRun:
    """Run one simulation to its deadline, then let the turns in flight finish; returns the
    measurements.

    ``on_tick`` sees the run every quarter second while it runs, and once more at the very end
    with the final numbers. Setting ``stop`` ends the run early: turns in flight are abandoned
    (``run.interrupted``), the bridge is shut down, and what ran so far is returned.
    ``make_client`` connects a :class:`~oam_actors.client.Client` to the server under test.
    """
    run = SimRun(config)
    rng = random.Random(config.seed)
    async with make_client() as client:
        _install_game_engine(client, run, random.Random(rng.random()), config)
        async with anyio.create_task_group() as watchers:
            if on_tick is not None:
                watchers.start_soon(_ticker, run, on_tick)
            with anyio.CancelScope() as load:
                if stop is not None:
                    watchers.start_soon(_interrupt, stop, run, load)
                await _load(client, run, backend, rng)
            watchers.cancel_scope.cancel()
        run.finished = time.monotonic()
        if run.load_ended is None:
            run.load_ended = run.finished - run.started
        await client.call("shutdown")
    run.backend_stats = await backend.statistics()
    if on_tick is not None:
        on_tick(run)
    return run


async def _load(client: Client, run: SimRun, backend: Backend, rng: random.Random) -> None:
    config = run.config
    npcs = await _create_npcs(client, config, backend)
    talkers = await _create_sessions(client, config, backend) + npcs
    ambient = await create_conversations(client, config, [t.owner for t in npcs], run.ambient)
    run.load_started = time.monotonic() - run.started
    deadline = time.monotonic() + config.duration_seconds
    async with anyio.create_task_group() as tg:
        for index, talker in enumerate(talkers):
            run.conversations[talker.owner] = Conversation(talker.owner)
            tg.start_soon(_converse, client, run, talker, deadline, random.Random(config.seed * 1000 + index))
        for index, conversation in enumerate(ambient):
            tg.start_soon(converse_ambient, client, config, run.ambient, conversation, deadline,
                          random.Random(config.seed * 7000 + index))
        await anyio.sleep(max(0.0, deadline - time.monotonic()))
        run.load_ended = time.monotonic() - run.started
        run.backend_at_load_end = await backend.statistics()


async def _interrupt(stop: anyio.Event, run: SimRun, load: anyio.CancelScope) -> None:
    await stop.wait()
    run.interrupted = True
    run.abandoned = run.in_flight
    if run.load_ended is None:
        run.load_ended = time.monotonic() - run.started
    load.cancel()


async def _create_sessions(client: Client, config: SimConfig, backend: Backend) -> list[Talker]:
    owners = []
    for index in range(config.sessions):
        owner = f"player{index + 1}"
        params: dict[str, Any] = {
            "session": owner,
            "instructions": "You are a guard at the village gate. Be brief and friendly.",
            "tools": TOOLS,
            "options": {"toolTimeoutSeconds": config.tool_timeout_seconds},
        }
        model = backend.session_model(index)
        if model is not None:
            params["model"] = model
        await client.call("session/create", params)
        owners.append(Talker(owner, "session"))
    return owners


async def _create_npcs(client: Client, config: SimConfig, backend: Backend) -> list[Talker]:
    """The crowd: NPCs on one shared world, with the same client tools as the sessions."""
    if config.npc_count < 1:
        return []
    await client.call("world/create", {"world": "village", "state": {"time": "morning", "gate": "closed"}})
    npcs = []
    for index in range(config.npc_count):
        npc = f"villager{index + 1}"
        params: dict[str, Any] = {
            "npc": npc,
            "persona": {"name": f"Villager {index + 1}", "role": ROLES[index % len(ROLES)],
                        "personality": "Friendly, a little gossipy.", "speakingStyle": "Short sentences."},
            "world": "village",
            "tools": TOOLS,
            "options": {"toolTimeoutSeconds": config.tool_timeout_seconds, "fallbackLines": list(FALLBACK_LINES)},
        }
        model = backend.npc_model(index)
        if model is not None:
            params["model"] = model
        await client.call("npc/create", params)
        npcs.append(Talker(npc, "npc", backend.decision_model()))
    return npcs


async def _converse(client: Client, run: SimRun, talker: Talker, deadline: float, rng: random.Random) -> None:
    # Spread the first turns so the crowd does not start in lock step.
    await anyio.sleep(rng.random() * run.config.think_seconds)
    while time.monotonic() < deadline:
        started = time.monotonic()
        outcome = OK
        tool_calls = tool_errors = 0
        degraded = repeated = False
        kind, method, params = talker.action(rng, run.config)
        run.in_flight += 1
        try:
            async with anyio.create_task_group() as tg:
                # Only turns are cancellable (npc/cancel leaves barks and decisions alone).
                if kind in (SESSION, TALK) and rng.random() < run.config.cancel_rate:
                    tg.start_soon(_cancel_later, client, run, talker, rng.random() * 0.5)
                try:
                    result = await client.call(method, params)
                    tool_calls = len(result.get("toolCalls", []))
                    tool_errors = sum(1 for record in result.get("toolCalls", []) if record.get("isError"))
                    if result.get("isFallback"):
                        outcome = FALLBACK
                        degraded = result.get("degraded") is not None
                        repeated = result.get("repeated") is True
                except OamError as exc:
                    outcome = exc.code.wire
                tg.cancel_scope.cancel()
        finally:
            run.in_flight -= 1
        run.record(TurnSample(talker.owner, started - run.started, time.monotonic() - started, outcome,
                              tool_calls, tool_errors, kind, degraded, repeated))
        pause = rng.expovariate(1 / run.config.think_seconds) if run.config.think_seconds > 0 else 0.0
        await anyio.sleep(max(0.0, min(pause, deadline - time.monotonic())))


async def _cancel_later(client: Client, run: SimRun, talker: Talker, delay: float) -> None:
    await anyio.sleep(delay)
    run.cancels_sent += 1
    await client.notify(talker.cancel_method, {talker.kind: talker.owner})


def _install_game_engine(client: Client, run: SimRun, rng: random.Random, config: SimConfig) -> None:
    """The simulated game answers every tool call after a short think, or leaves some unanswered
    (its handler waits until the server's ``tool/cancel`` at the tool timeout cancels it)."""

    async def answer(name: str, **arguments: Any) -> Any:
        if rng.random() < config.tool_timeout_rate:
            run.tool_calls_ignored += 1
            await anyio.sleep_forever()
        await anyio.sleep(rng.random() * config.tool_latency_seconds)
        if name == "open_gate":
            output: Any = {"opened": rng.random() > 0.2, "gate": arguments.get("gate", "north")}
        else:
            output = {"ale": rng.randint(0, 9), "stew": rng.randint(0, 5), "bread": rng.randint(0, 12)}
        run.tool_calls_answered += 1
        return output

    for tool in TOOLS:
        client.add_tool(tool["name"], functools.partial(answer, tool["name"]))


async def _ticker(run: SimRun, on_tick: Callable[[SimRun], None]) -> None:
    """Until cancelled: the run drains after its deadline, and the display keeps up with it."""
    while True:
        on_tick(run)
        await anyio.sleep(0.25)
