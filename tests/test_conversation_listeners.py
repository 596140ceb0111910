"""What a conversation's response guarantees about its listeners' memory (PROTOCOL.md §10.9), in
process on LocalSystem with scripted NPCs and a virtual clock: the response to a line waits
until every member and bystander has remembered it (durably, with a state store), even a
bystander busy with the player; a listener deleted meanwhile misses the line without failing it,
and is named in ``unheard``.

Dena, the bystander, is kept busy by a talk whose client tool is held until the test releases
it: her note is queued behind that talk. Nothing asserts how long anything took; ``HANG_GUARD``
only fails a hung test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec

from oam_actors import Bridge, LocalSystem
from oam_actors.client import Client, InProcessEndpoint, connect
from oam_actors.clock import ManualClock
from oam_actors.game_methods import GameExtension
from oam_actors.runtime import Durability, SqliteStore

HANG_GUARD = 30.0
GATE = {"name": "open_gate", "description": "Open a gate.",
        "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}}}
OVERHEARD = ["(overheard) Bran to Cora: The bridge is out, Cora.", "(overheard) Cora: Then the miller cannot come."]


def scripted(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"type": "scripted", "steps": list(steps)}


@dataclass
class Tavern:
    """Bran and Cora talk in conversation ``c``; Dena (audience) holds the gate tool while busy."""

    client: Client
    tasks: anyio.abc.TaskGroup
    asked: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    results: dict[str, Any] = field(default_factory=dict)

    async def open_gate(self, gate: str) -> dict[str, Any]:
        self.asked.set()
        await self.release.wait()
        return {"opened": gate}

    def start(self, name: str, call: Callable[[], Awaitable[Any]]) -> None:
        """Run ``call`` beside the test; its result (or error) lands in ``results[name]``."""

        async def run() -> None:
            try:
                self.results[name] = await call()
            except Exception as exc:  # noqa: BLE001 - the test asserts on it
                self.results[name] = exc

        self.tasks.start_soon(run)

    async def dena_busy(self) -> None:
        """Dena talks with the player and waits for the gate tool: her lane is taken."""
        self.start("talk", lambda: self.client.call("npc/talk", {"npc": "dena", "line": "Open the north gate."}))
        await self.asked.wait()


@asynccontextmanager
async def tavern(durability: Durability | None = None) -> AsyncIterator[Tavern]:
    clock = ManualClock()
    with anyio.fail_after(HANG_GUARD):
        async with LocalSystem(durability=durability) as system:

            def make(write: Callable[[bytes], Awaitable[None]]) -> Bridge:
                return Bridge(system, write, extensions=[GameExtension(clock=clock)])

            async with connect(InProcessEndpoint(make)) as client, anyio.create_task_group() as tasks:
                place = Tavern(client, tasks)
                client.add_tool("open_gate", place.open_gate)
                await client.call("world/create", {"world": "tavern"})
                for npc, model in (
                    ("bran", scripted({"text": "The bridge is out, Cora."})),
                    ("cora", scripted({"text": "Then the miller cannot come."})),
                    ("dena", scripted({"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]},
                                      {"json": {"emotion": "neutral", "line": "Done.", "player_options": [],
                                                "ends_conversation": False}})),
                ):
                    await client.call("npc/create", {"npc": npc, "persona": {"name": npc.capitalize()},
                                                     "world": "tavern", "model": model, "tools": [GATE]})
                await client.call("conversation/create", {"conversation": "c", "world": "tavern",
                                                          "members": ["bran", "cora"], "audience": ["dena"]})
                yield place


async def heard_now(client: Client, npc: str) -> list[str]:
    """What ``npc`` remembers hearing, read on its control lane (not behind its queued work)."""
    state = await client.call("npc/state", {"npc": npc, "settle": False})
    return list(state["state"]["memory"].get("heard", []))


async def test_the_response_to_a_line_waits_until_a_busy_bystander_has_remembered_it() -> None:
    async with tavern() as place:
        await place.dena_busy()
        place.start("run", lambda: place.client.call("conversation/run", {"conversation": "c", "lines": 2}))
        await anyio.wait_all_tasks_blocked()
        assert "run" not in place.results  # Dena's note is queued behind her talk: the answer waits
        place.release.set()
        while "run" not in place.results:
            await anyio.wait_all_tasks_blocked()
        run = place.results["run"]
        assert [line["line"] for line in run["lines"]] == ["The bridge is out, Cora.", "Then the miller cannot come."]
        assert "unheard" not in run
        # Asked right after the response, on the lane that does not wait for her queue: she knows.
        assert await heard_now(place.client, "dena") == OVERHEARD
        assert (await heard_now(place.client, "cora"))[0] == "Bran to you: The bridge is out, Cora."
        assert place.results["talk"]["line"] == "Done."


async def test_with_a_state_store_the_note_is_durable_before_the_response(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    async with tavern(Durability(store)) as place:
        await place.dena_busy()
        place.start("run", lambda: place.client.call("conversation/run", {"conversation": "c", "lines": 2}))
        await anyio.wait_all_tasks_blocked()
        place.release.set()
        while "run" not in place.results:
            await anyio.wait_all_tasks_blocked()
        [record] = [r for r in store.records(kind="npc") if r.id == "dena"]
        assert msgspec.json.decode(record.state)["state"]["memory"]["heard"] == OVERHEARD
    store.close()


async def test_a_listener_deleted_mid_line_misses_it_and_the_line_goes_on() -> None:
    async with tavern() as place:
        await place.dena_busy()
        place.start("run", lambda: place.client.call("conversation/run", {"conversation": "c", "lines": 2}))
        await anyio.wait_all_tasks_blocked()
        assert "run" not in place.results
        assert await place.client.call("npc/delete", {"npc": "dena"}) == {"npc": "dena", "deleted": True}
        while "run" not in place.results or "talk" not in place.results:
            await anyio.wait_all_tasks_blocked()
        run = place.results["run"]
        assert [line["speaker"] for line in run["lines"]] == ["bran", "cora"]
        assert run["unheard"] == ["dena"]
        assert run["lineCount"] == 2
        assert (await heard_now(place.client, "bran"))[1] == "Cora: Then the miller cannot come."
        state = await place.client.call("conversation/state", {"conversation": "c"})
        assert (len(state["state"]["lines"]), state["state"]["audience"]) == (2, [])
