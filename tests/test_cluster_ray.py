"""RaySystem on a real local Ray instance (``ray.init``): the ActorSystem contract across processes,
the bridge's ordering guarantees over it, checkpoints, and shards killed during turns (what they
held comes back: conversations, scripted positions, NPC memory and pending compaction, world
documents and subscriptions).

Every wait has a hang guard; no assertion is about elapsed time. Tests share one Ray instance and
one two-shard system (distinct addresses each); the fault tests get systems of their own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest
import pytest_asyncio
import ray
import ray.cloudpickle

from oam_actors import AgentError, Bridge, ErrorCode, GameExtension
from oam_actors.bridge import BridgeConfig
from oam_actors.bridge.bridge import tenant_namespace
from test_admission import assert_started_in_arrival_order, burst
from test_admission import open_wire as open_admission_wire
from oam_actors.cluster import (
    ClusterModel,
    RaySystem,
    RemoteModel,
    host_model,
    private_ray,
    shard_of,
    stop_model,
)
from oam_actors.cluster.models import model_running
from oam_actors.agent import ModelCapabilities
from oam_actors.models.device import PhoneConfig, SimulatedPhone
from oam_actors.models.device_backends import DeviceBackends
from oam_actors.models.setup import ModelConfig, create_model_setup
from oam_actors.runtime import (
    Actor,
    ActorExists,
    ActorSystem,
    ActorStopped,
    Address,
    Durability,
    HostFailed,
    LocalSystem,
    MailboxFull,
    MessageCancelled,
    open_store,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

HANG_GUARD = 30.0  # seconds; only to fail a hung test instead of blocking the suite

# Shards cannot import this test module: what it defines travels by value (actors through our
# pickler, model factories through Ray's own).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    with private_ray():  # its session folder removed after
        yield


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(ray_instance: None) -> AsyncIterator[RaySystem]:
    # Entered and left on one task of its own: a task group cannot span fixture setup and teardown.
    opened: list[RaySystem] = []
    ready, done = anyio.Event(), anyio.Event()

    async def host() -> None:
        async with RaySystem(shards=2) as ray_system:
            opened.append(ray_system)
            ready.set()
            await done.wait()

    task = asyncio.get_running_loop().create_task(host())
    await ready.wait()
    yield opened[0]
    done.set()
    await task


# --- actors used below -----------------------------------------------------------------------------


class Echo(Actor):
    """Replies ``(message, how many it handled)``; control ``"pid"`` names its process."""

    def __init__(self) -> None:
        self.count = 0

    async def handle(self, message: Any) -> Any:
        self.count += 1
        return [message, self.count]

    async def handle_control(self, message: Any) -> Any:
        return os.getpid() if message == "pid" else ["control", message, self.count]


class Gate(Actor):
    """Each ordered message waits until a control ``"open"`` arrives (or it is cancelled)."""

    async def on_start(self) -> None:
        self.opened = anyio.Event()  # made here: events live in the shard, they do not pickle

    async def handle(self, message: Any) -> Any:
        await self.opened.wait()
        self.opened = anyio.Event()
        return message

    async def handle_control(self, message: Any) -> Any:
        self.opened.set()
        return "opened"


class Failing(Actor):
    async def handle(self, message: Any) -> Any:
        if message == "agent":
            raise AgentError(ErrorCode.RATE_LIMITED, "Slow down.", retry_after=2)
        raise ValueError(f"bad {message}")

    async def on_stop(self) -> None:
        raise KeyError("on_stop failed")


class Counter(Actor):
    """Commits every addition; checkpoints its total."""

    def __init__(self) -> None:
        self.total = 0

    async def handle(self, message: Any) -> Any:
        if message == "slow":
            await anyio.sleep_forever()
        self.commit()
        self.total += message
        return self.total

    async def handle_control(self, message: Any) -> Any:
        return self.total if message == "total" else os.getpid()

    def snapshot(self) -> bytes:
        return str(self.total).encode()

    def restore(self, state: bytes) -> None:
        self.total = int(state)


def spread(kind: str, count: int, shards: int = 2) -> list[Address]:
    """``count`` addresses of ``kind`` on each of the shards."""
    chosen: dict[int, list[Address]] = {index: [] for index in range(shards)}
    for number in range(1000):
        address = Address(kind, str(number))
        placed = chosen[shard_of(address, shards)]
        if len(placed) < count:
            placed.append(address)
    return [address for addresses in chosen.values() for address in addresses]


# --- the ActorSystem contract ----------------------------------------------------------------------


async def test_each_actor_handles_its_messages_in_order_on_its_shard(system: RaySystem) -> None:
    addresses = spread("echo", 3)
    refs = [system.spawn(address, Echo) for address in addresses]
    replies = [(ref, n, ref.ask_nowait(n)) for n in range(20) for ref in refs]
    with anyio.fail_after(HANG_GUARD):
        for _, n, reply in replies:
            assert await reply.wait() == [n, n + 1]
        pids = {await ref.ask_control("pid") for ref in refs}
    assert len(pids) == 2 and os.getpid() not in pids  # two shard processes, neither this one
    assert system.addresses("echo") == addresses and system.lookup(addresses[0]) is not None
    with pytest.raises(ActorExists):
        system.spawn(addresses[0], Echo)


class Collector(Actor):
    """Answers its process's garbage-collector thresholds."""

    async def handle(self, message: Any) -> Any:
        import gc

        return gc.get_threshold()


async def test_shards_collect_garbage_as_seldom_as_a_cli_server(system: RaySystem) -> None:
    from oam_actors.runtime._tuning import GEN0_THRESHOLD

    refs = [system.spawn(address, Collector) for address in spread("gc", 1)]
    with anyio.fail_after(HANG_GUARD):
        thresholds = [await ref.ask(None) for ref in refs]
    assert [threshold[0] for threshold in thresholds] == [GEN0_THRESHOLD, GEN0_THRESHOLD]


async def test_control_calls_overtake_a_running_message(system: RaySystem) -> None:
    ref = system.spawn(Address("gate", "control"), Gate)
    first, second = ref.ask_nowait("first"), ref.ask_nowait("second")
    with anyio.fail_after(HANG_GUARD):
        assert await ref.ask_control("open") == "opened"
        assert await first.wait() == "first"
        assert not second.done()
        assert await ref.ask_control("open") == "opened"
        assert await second.wait() == "second"


async def test_cancel_all_cancels_the_running_and_queued_messages_only(system: RaySystem) -> None:
    ref = system.spawn(Address("gate", "cancel"), Gate)
    queued = [ref.ask_nowait(n) for n in range(3)]
    assert ref.cancel_all() == 3 and ref.cancel_all() == 0
    after = ref.ask_nowait("after")
    with anyio.fail_after(HANG_GUARD):
        for reply in queued:
            with pytest.raises(MessageCancelled):
                await reply.wait()
        await ref.ask_control("open")
        assert await after.wait() == "after"
    one, two = ref.ask_nowait(1), ref.ask_nowait(2)
    assert two.cancel() and not two.cancel()
    with anyio.fail_after(HANG_GUARD):
        await ref.ask_control("open")
        assert await one.wait() == 1
        with pytest.raises(MessageCancelled):
            await two.wait()
    assert ref.statistics().cancelled == 4 and ref.statistics().processed == 2


async def test_a_full_mailbox_refuses_at_once(system: RaySystem) -> None:
    ref = system.spawn(Address("gate", "full"), Gate, max_queue=2)
    replies = [ref.ask_nowait(n) for n in range(3)]  # one running, two queued
    with pytest.raises(MailboxFull):
        ref.ask_nowait("one too many")
    assert ref.statistics().queued == 2
    ref.cancel_all()
    with anyio.fail_after(HANG_GUARD):
        for reply in replies:
            with pytest.raises(MessageCancelled):
                await reply.wait()


class Held(Actor):
    """Records each message as it begins, then waits for a control ``"release"``; control
    ``"began"`` answers what has begun. ``"fail"`` fails once released."""

    async def on_start(self) -> None:
        self.began: list[Any] = []
        self.released = anyio.Semaphore(0)  # made here: it lives in the shard

    async def handle(self, message: Any) -> Any:
        self.began.append(message)
        await self.released.acquire()
        if message == "fail":
            raise ValueError("told to fail")
        return message

    async def handle_control(self, message: Any) -> Any:
        if message == "release":
            self.released.release()
        return list(self.began)


@asynccontextmanager
async def either_system(kind: str, ray_system: RaySystem) -> AsyncIterator[ActorSystem]:
    if kind == "ray":
        yield ray_system
    else:
        async with LocalSystem() as local:
            yield local


@pytest.mark.parametrize("kind", ["local", "ray"])
async def test_a_tell_past_a_full_mailbox_is_refused_and_every_accepted_one_is_handled(
    kind: str, system: RaySystem, caplog: pytest.LogCaptureFixture
) -> None:
    async with either_system(kind, system) as actors:
        ref = actors.spawn(Address("held", f"tells-{kind}"), Held, max_queue=2)
        with anyio.fail_after(HANG_GUARD):
            ref.tell_nowait("fail")
            while await ref.ask_control("began") != ["fail"]:  # running: not counted by the bound
                await anyio.sleep(0.01)
            ref.tell_nowait(1)
            ref.tell_nowait(2)
            with pytest.raises(MailboxFull):
                ref.tell_nowait("one too many")
            with pytest.raises(MailboxFull):
                ref.ask_nowait("one too many")
            assert (ref.statistics().running, ref.statistics().queued) == (1, 2)
            with caplog.at_level(logging.ERROR):
                for _ in range(3):
                    await ref.ask_control("release")
                while await ref.ask_control("began") != ["fail", 1, 2]:
                    await anyio.sleep(0.01)
                last = ref.ask_nowait("last")  # its reply follows the told messages' outcomes
                await ref.ask_control("release")
                assert await last.wait() == "last"
            assert await ref.ask_control("began") == ["fail", 1, 2, "last"]
        stats = ref.statistics()
        assert (stats.queued, stats.running, stats.processed, stats.failed) == (0, 0, 3, 1)
        assert any(f"held:tells-{kind}" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_errors_reach_the_asker_as_they_were_raised(system: RaySystem) -> None:
    ref = system.spawn(Address("failing", "f"), Failing)
    with anyio.fail_after(HANG_GUARD):
        with pytest.raises(AgentError) as agent_error:
            await ref.ask("agent")
        with pytest.raises(ValueError, match="bad other"):
            await ref.ask("other")
        assert agent_error.value.to_wire()["data"]["retryAfterSeconds"] == 2
        with pytest.raises(KeyError, match="on_stop failed"):
            await system.stop(ref.address)
    assert system.lookup(ref.address) is None
    with pytest.raises(ActorStopped):
        ref.ask_nowait("late")


async def test_what_does_not_pickle_is_refused_where_it_is_sent(system: RaySystem) -> None:
    class Holder(Echo):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()

    with pytest.raises(TypeError, match="cannot move to a shard"):
        system.spawn(Address("echo", "lock"), Holder)
    ref = system.spawn(Address("echo", "fn"), Echo)
    with pytest.raises(TypeError, match="cannot cross to another process"):
        ref.ask_nowait(threading.Lock())


async def test_committed_messages_are_checkpointed_before_they_answer(system: RaySystem) -> None:
    ref = system.spawn(Address("counter", "store"), Counter)
    with anyio.fail_after(HANG_GUARD):
        assert await ref.ask(5) == 5
        assert system.store.get("counter:store") == b"5"
        assert await ref.ask(2) == 7
        assert system.store.get("counter:store") == b"7"
        assert await system.stop(ref.address)
    assert system.store.get("counter:store") is None


# --- the bridge over RaySystem ---------------------------------------------------------------------


class Wire:
    """One in-process bridge over a system; ``log`` holds every message it wrote, in order."""

    def __init__(self) -> None:
        self.bridge: Bridge | None = None  # set by open_wire
        self.log: list[dict[str, Any]] = []
        self._changed = anyio.Event()
        self._lines, self._input = anyio.create_memory_object_stream[bytes](1000)
        self._ids = 0

    async def write(self, data: bytes) -> None:
        self.log.extend(msgspec.json.decode(line) for line in data.split(b"\n"))
        self._changed.set()
        self._changed = anyio.Event()

    def send(self, message: dict[str, Any]) -> None:
        self._lines.send_nowait(msgspec.json.encode({"jsonrpc": "2.0", **message}))

    def request(self, method: str, params: dict[str, Any]) -> int:
        self._ids += 1
        self.send({"id": self._ids, "method": method, "params": params})
        return self._ids

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> int:
        with anyio.fail_after(HANG_GUARD):
            while True:
                for index, message in enumerate(self.log):
                    if predicate(message):
                        return index
                await self._changed.wait()

    async def response(self, request_id: Any) -> dict[str, Any]:
        return self.log[await self.wait_for(lambda m: m.get("id") == request_id and "method" not in m)]

    async def result(self, request_id: Any) -> Any:
        message = await self.response(request_id)
        assert "result" in message, message
        return message["result"]

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        return await self.result(self.request(method, params))


@asynccontextmanager
async def open_wire(system: RaySystem, *, game: bool = False, config: BridgeConfig | None = None
                    ) -> AsyncIterator[Wire]:
    wire = Wire()
    bridge = wire.bridge = Bridge(system, wire.write, config=config, extensions=[GameExtension()] if game else [])
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(bridge.serve, wire._input)
        yield wire
        wire._lines.close()


OPEN_GATE = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}


def check_invariants(log: list[dict[str, Any]]) -> None:
    """Events before responses and one response per id, over a whole run."""
    answered: set[Any] = set()
    for message in log:
        if "method" not in message:
            assert message["id"] not in answered, f"two responses for {message['id']!r}"
            answered.add(message["id"])
        elif isinstance(message.get("params"), dict) and "requestId" in message["params"]:
            assert message["params"]["requestId"] not in answered, f"{message} came after its response"


async def test_a_burst_of_turns_starts_in_arrival_order_on_a_shard(ray_instance: None) -> None:
    async with RaySystem(shards=1, max_running=3) as gated, open_admission_wire(gated) as wire:
        ids = await burst(wire, 12)
        assert_started_in_arrival_order(wire.log, ids, 3)


async def test_a_connection_is_admitted_ahead_of_another_connections_backlog_on_a_shard(ray_instance: None) -> None:
    """The flow (connection) of each request travels to the shard's gate: with one running slot,
    a second connection's turn runs after the first connection's running one, not after its
    whole backlog of earlier arrivals, and that connection's turns start in its arrival order.
    The calm turn is sent once the first flood turn has answered, so the flood's backlog is at
    the gate before it, whatever order the shard's actor tasks ran in. (Each flood turn takes
    three seconds, so the calm turn reaches the gate before the second one ends even on a
    loaded machine.)"""
    async with (RaySystem(shards=1, max_running=1) as gated, open_admission_wire(gated) as flood,
                open_admission_wire(gated) as calm):
        for session in range(3):
            slow = [{"text": f"f{session} {n}", "delayMs": 3000} for n in range(3)]
            await flood.result(await flood.request("session/create", {"session": f"f{session}", "model": {"type": "scripted", "steps": slow}}))
        await calm.result(await calm.request("session/create", {"session": "c", "model": {"type": "scripted", "steps": [{"text": "calm"}]}}))
        ids = [await flood.request("session/respond", {"session": f"f{n % 3}", "prompt": "Go."}) for n in range(9)]
        assert (await flood.result(ids[0]))["text"] == "f0 0"
        assert (await calm.result(await calm.request("session/respond", {"session": "c", "prompt": "Go."})))["text"] == "calm"
        # Arrival order (one gate queue) would have run all nine first.
        assert [m["result"]["text"] for m in flood.log if m.get("id") in ids and "result" in m] == ["f0 0", "f1 0"]
        cancels = [await flood.request("session/cancel", {"session": f"f{session}"}) for session in range(3)]
        assert sum([(await flood.result(cancel))["cancelled"] for cancel in cancels]) == 7


async def test_sessions_on_two_shards_keep_every_ordering_guarantee(system: RaySystem) -> None:
    sessions = [f"s{n}" for n in range(8)]
    async with open_wire(system) as wire:
        turns: dict[str, list[int]] = {}
        for session in sessions:  # pipelined: create, then three turns, without waiting
            steps = [{"text": f"{session} says {n}"} for n in range(3)]
            wire.request("session/create", {"session": session, "model": {"type": "scripted", "steps": steps}})
            turns[session] = [wire.request("session/respond", {"session": session, "prompt": f"p{n}", "stream": True})
                              for n in range(3)]
        for session, ids in turns.items():
            for n, request_id in enumerate(ids):
                assert (await wire.result(request_id))["text"] == f"{session} says {n}"
            order = [wire.log.index(await wire.response(request_id)) for request_id in ids]
            assert order == sorted(order)
        shards = {shard_of(Address("session", s), 2) for s in sessions}
        check_invariants(wire.log)
    assert shards == {0, 1}


async def test_a_client_tool_round_trip_uses_the_connections_ids(system: RaySystem) -> None:
    model = {"type": "scripted", "steps": [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]},
                                           {"template": "Done: {toolOutput}"}]}
    async with open_wire(system) as wire:
        await wire.call("session/create", {"session": "tools", "tools": [OPEN_GATE], "model": model})
        turn = wire.request("session/respond", {"session": "tools", "prompt": "open it", "stream": True})
        call = wire.log[await wire.wait_for(lambda m: m.get("method") == "tool/call")]
        assert call["id"] == "t-1" and call["params"]["call"]["arguments"] == {"gate": "north"}
        wire.send({"id": "t-1", "result": {"output": "the gate is open"}})
        assert (await wire.result(turn))["text"] == "Done: the gate is open"
        started = await wire.wait_for(lambda m: m.get("params", {}).get("event", {}).get("type") == "toolCallStarted")
        assert started < wire.log.index(call) < wire.log.index(await wire.response(turn))
        check_invariants(wire.log)


async def test_a_tool_timeout_cancels_with_the_connections_id(system: RaySystem) -> None:
    tool = {**OPEN_GATE, "timeoutSeconds": 0.2}
    model = {"type": "scripted", "steps": [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "west"}}]},
                                           {"text": "Gave up."}]}
    async with open_wire(system) as wire:
        await wire.call("session/create", {"session": "timeout", "tools": [tool], "model": model})
        turn = wire.request("session/respond", {"session": "timeout", "prompt": "open it"})
        assert (await wire.result(turn))["text"] == "Gave up."
        cancel = wire.log[await wire.wait_for(lambda m: m.get("method") == "tool/cancel")]
        call = wire.log[await wire.wait_for(lambda m: m.get("method") == "tool/call")]
        assert cancel["params"]["id"] == call["id"] == "t-1"
        check_invariants(wire.log)


async def test_session_cancel_counts_and_answers_in_queue_order(system: RaySystem) -> None:
    slow = {"type": "scripted", "steps": [{"text": "slow", "delayMs": 60000}, {"text": "after the cancel"}]}
    async with open_wire(system) as wire:
        await wire.call("session/create", {"session": "slow", "model": slow})
        one = wire.request("session/respond", {"session": "slow", "prompt": "one", "stream": True})
        await wire.wait_for(lambda m: m.get("params", {}).get("requestId") == one)
        two = wire.request("session/respond", {"session": "slow", "prompt": "two"})
        assert await wire.call("session/cancel", {"session": "slow"}) == {"session": "slow", "cancelled": 2}
        for request_id in (one, two):
            assert (await wire.response(request_id))["error"]["data"]["code"] == "cancelled"
        three = wire.request("session/respond", {"session": "slow", "prompt": "three"})
        assert (await wire.result(three))["text"] == "after the cancel"
        listing = await wire.call("session/list", {})
        assert [(s["session"], s["entries"], s["busy"]) for s in listing["sessions"]] == [("slow", 2, False)]
        check_invariants(wire.log)


def tool_step(name: str, **arguments: Any) -> dict[str, Any]:
    return {"toolCalls": [{"name": name, "arguments": arguments}]}


def npc_reply(line: str) -> dict[str, Any]:
    return {"json": {"emotion": "neutral", "line": line, "player_options": [], "ends_conversation": False}}


def on_shard(index: int, name: str) -> str:
    """An NPC id starting with ``name`` whose shard (of 2) is ``index``."""
    return next(i for i in (f"{name}{n}" for n in range(100)) if shard_of(Address("npc", i), 2) == index)


def elsewhere(address: Address, kind: str) -> str:
    """An id of ``kind`` whose own shard is not the shard of ``address``."""
    return next(i for i in (f"{kind}{n}" for n in range(100)) if shard_of(Address(kind, i), 2) != shard_of(address, 2))


async def test_npcs_share_their_worlds_document_across_processes_and_restarts(ray_instance: None) -> None:
    village = Address("world", "village")
    # They live on the other shard (their own), with a replica of the world's document there.
    gorm, mira = (next(i for i in (f"{name}{n}" for n in range(100))
                       if shard_of(Address("npc", i), 2) != shard_of(village, 2)) for name in ("gorm", "mira"))
    assert shard_of(Address("npc", gorm), 2) == shard_of(Address("npc", mira), 2) != shard_of(village, 2)
    writer = {"type": "scripted", "steps": [tool_step("update_world_state", path="quests.ring", value="started"),
                                            npc_reply("Find my ring.")]}
    reader = {"type": "scripted", "steps": [step for reply in ("Hurry.", "Good.", "Still good.")
                                            for step in (tool_step("read_world_state", path="quests.ring"),
                                                         npc_reply(reply))]}
    async with RaySystem(shards=2) as game_system, open_wire(game_system, game=True) as wire:
        await wire.call("world/create", {"world": "village", "state": {"player": {"gold": 60}}})
        await wire.call("world/subscribe", {"world": "village", "path": "quests"})
        for npc, model, options in ((gorm, writer, {"worldWritable": ["quests"]}),
                                    (mira, reader, {"groundingTool": "read_world_state"})):
            await wire.call("npc/create", {"npc": npc, "persona": {"name": npc.title()}, "world": "village",
                                           "options": options, "model": model})
        talk = wire.request("npc/talk", {"npc": gorm, "line": "Any work?"})
        changed = await wire.wait_for(lambda m: m.get("method") == "world/changed")
        assert wire.log[changed]["params"]["newValue"] == "started"
        assert changed < wire.log.index(await wire.response(talk))
        read = await wire.call("npc/talk", {"npc": mira, "line": "News?"})
        assert read["toolCalls"][0]["output"] == "started"
        assert (await wire.call("world/get", {"world": "village", "path": "quests.ring"}))["value"] == "started"
        # The world's shard dies: the document (changed by an NPC tool) and the NPCs come back.
        await kill_and_wait(game_system, shard_of(village, 2))
        assert (await wire.call("world/get", {"world": "village", "path": "quests.ring"}))["value"] == "started"
        state = (await wire.call("npc/state", {"npc": gorm, "settle": False}))["state"]
        entries = state["transcript"]["transcript"]["entries"]
        assert [entry["type"] for entry in entries] == ["prompt", "toolUse", "response"]
        assert entries[1]["call"]["arguments"] == {"path": "quests.ring", "value": "started"}
        # The subscription made before the kill still hears of changes.
        wrote = wire.request("world/set", {"world": "village", "path": "quests.ring", "value": "found"})
        changed = await wire.wait_for(lambda m: m.get("method") == "world/changed" and m["params"]["newValue"] == "found")
        assert changed < wire.log.index(await wire.response(wrote))
        # The NPCs' replica follows the restarted world: it hears of the change made there.
        read = await wire.call("npc/talk", {"npc": mira, "line": "And now?"})
        assert read["toolCalls"][0]["output"] == "found"
        # The NPCs' shard dies: its new process copies the world's document again.
        await kill_and_wait(game_system, shard_of(Address("npc", mira), 2))
        read = await wire.call("npc/talk", {"npc": mira, "line": "Still?"})
        assert read["toolCalls"][0]["output"] == "found"
        check_invariants(wire.log)


async def test_npcs_on_both_shards_write_one_world_at_once_and_every_shard_reads_both_writes(
        ray_instance: None) -> None:
    reads = {"toolCalls": [{"name": "read_world_state", "arguments": {"path": f"quests.{key}"}} for key in "ab"]}
    async with RaySystem(shards=2) as game_system, open_wire(game_system, game=True) as wire:
        await wire.call("world/create", {"world": "village", "state": {"quests": {}}})
        writers = {on_shard(index, f"writer{key}"): key for index, key in enumerate("ab")}
        readers = [on_shard(index, "reader") for index in range(2)]
        for npc, key in writers.items():
            await wire.call("npc/create", {"npc": npc, "persona": {"name": "W"}, "world": "village",
                                           "options": {"worldWritable": ["quests"]}, "model": {"type": "scripted",
                                           "steps": [tool_step("update_world_state", path=f"quests.{key}", value=npc),
                                                     npc_reply("Done.")]}})
        for npc in readers:
            await wire.call("npc/create", {"npc": npc, "persona": {"name": "R"}, "world": "village",
                                           "options": {"worldReadable": ["quests"]},
                                           "model": {"type": "scripted", "steps": [reads, npc_reply("I see.")]}})
        talks = [wire.request("npc/talk", {"npc": npc, "line": "Go."}) for npc in writers]  # at once
        for talk in talks:
            assert "result" in await wire.response(talk)
        expected = {key: npc for npc, key in writers.items()}
        assert (await wire.call("world/get", {"world": "village", "path": "quests"}))["value"] == expected
        for npc in readers:  # the world's shard reads its document; the other its replica, kept in step
            read = await wire.call("npc/talk", {"npc": npc, "line": "Who went?"})
            assert [call["output"] for call in read["toolCalls"]] == [expected["a"], expected["b"]]
        check_invariants(wire.log)


async def kill_and_wait(system: RaySystem, index: int) -> None:
    """SIGKILL shard ``index`` and wait until the system has handled its restart."""
    restarts = system.shard_restarts()[index]
    os.kill((await system.shard_info())[index].pid, signal.SIGKILL)
    with anyio.fail_after(HANG_GUARD):
        while system.shard_restarts()[index] == restarts:
            await anyio.sleep(0.05)


async def test_a_restarted_shard_continues_scripts_memory_and_pending_compaction(ray_instance: None) -> None:
    guard = {"type": "scripted", "steps": [{"text": f"reply {n}"} for n in range(3)]}
    # The summary step is slow: the shard dies while the background compaction is still running.
    gorm = {"type": "scripted", "steps": [
        tool_step("change_relationship", reason="a gift", delta=7), npc_reply("Thank you."),
        {"text": "The player gave Gorm a gift.", "delayMs": 2000}, npc_reply("Welcome back.")]}
    options = {"memoryTools": ["changeRelationship"], "compactAfterTurns": 1, "keepRecentTurns": 0}
    async with RaySystem(shards=1) as one_shard, open_wire(one_shard, game=True) as wire:
        await wire.call("session/create", {"session": "guard", "model": guard})
        await wire.call("npc/create", {"npc": "gorm", "persona": {"name": "Gorm"}, "options": options, "model": gorm})
        assert (await wire.call("session/respond", {"session": "guard", "prompt": "one"}))["text"] == "reply 0"
        talk = await wire.call("npc/talk", {"npc": "gorm", "line": "A gift for you."})
        assert (talk["line"], talk["relationship"]) == ("Thank you.", 7)
        await kill_and_wait(one_shard, 0)
        # Each comes back where it was: the next step of its script, its memory, its compaction.
        assert (await wire.call("session/respond", {"session": "guard", "prompt": "two"}))["text"] == "reply 1"
        state = (await wire.call("npc/state", {"npc": "gorm"}))["state"]  # settles the compaction
        assert state["memory"]["summary"] == "The player gave Gorm a gift."
        assert state["memory"]["relationship"] == 7
        assert (await wire.call("npc/talk", {"npc": "gorm", "line": "Hello again."}))["line"] == "Welcome back."
        assert one_shard.shard_restarts() == [1]
        check_invariants(wire.log)


# --- faults ------------------------------------------------------------------------------------------


async def test_a_killed_shard_answers_in_flight_requests_and_restores_committed_state(
    ray_instance: None, tmp_path: Any
) -> None:
    store = open_store(str(tmp_path / "state.db"))
    # An echoing fallback: each answer names its own prompt, whichever process gives it.
    echo = {"type": "scripted", "fallback": {"template": "echo {prompt}"}}
    wait = {"name": "wait_for_player", "description": "Wait until the player is ready.",
            "parameters": {"type": "object", "properties": {}}, "timeoutSeconds": 0}
    async with RaySystem(shards=2, durability=Durability(store)) as fault_system, open_wire(fault_system) as wire:
        victim = next(s for s in (f"v{n}" for n in range(50)) if shard_of(Address("session", s), 2) == 0)
        bystander = next(s for s in (f"b{n}" for n in range(50)) if shard_of(Address("session", s), 2) == 1)
        await wire.call("session/create", {"session": victim, "model": echo, "tools": [wait],
                                           "instructions": "Be brief."})
        await wire.call("session/create", {"session": bystander, "model": echo})
        assert (await wire.result(wire.request("session/respond", {"session": victim, "prompt": "first"})))["text"] == "echo first"
        await wire.call("session/setContextNote", {"session": victim, "note": "It is night."})
        # A turn waiting for the client's tool answer is running when the shard dies under it.
        running = wire.request("session/respond", {"session": victim, "prompt": "second",
                                                   "toolChoice": {"tool": "wait_for_player"}})
        await wire.wait_for(lambda m: m.get("method") == "tool/call")
        queued = wire.request("session/respond", {"session": victim, "prompt": "third"})
        before = (await fault_system.shard_info())[0]
        os.kill(before.pid, signal.SIGKILL)
        for request_id in (running, queued):
            error = (await wire.response(request_id))["error"]
            assert (error["code"], error["data"]["code"]) == (-32603, "internal_error")
            assert "failed" in error["message"]
        # The next use brings the session back from its checkpoint on the new process.
        again = wire.request("session/respond", {"session": victim, "prompt": "fourth"})
        assert (await wire.result(again))["text"] == "echo fourth"
        transcript = (await wire.call("session/transcript", {"session": victim}))["transcript"]["transcript"]
        assert transcript["instructions"] == "Be brief." and transcript["contextNote"] == "It is night."
        assert [entry["text"] for entry in transcript["entries"]] == ["first", "echo first", "fourth", "echo fourth"]
        # The other shard never noticed.
        other = wire.request("session/respond", {"session": bystander, "prompt": "hi"})
        assert (await wire.result(other))["text"] == "echo hi"
        after = await fault_system.shard_info()
        assert after[0].pid != before.pid and after[0].incarnation != before.incarnation
        assert [shard.restarts for shard in after] == fault_system.shard_restarts() == [1, 0]
        check_invariants(wire.log)
    # Durable: kept when the bridge closed, as its last commit left it.
    stored = store.load(f"session:{tenant_namespace('')}{victim}")
    assert stored is not None and b"echo fourth" in stored.state
    # A front door started again on the same store finds the session where it was.
    async with RaySystem(shards=2, durability=Durability(store)) as again, open_wire(again) as wire:
        transcript = (await wire.call("session/transcript", {"session": victim}))["transcript"]["transcript"]
        assert [entry["text"] for entry in transcript["entries"]] == ["first", "echo first", "fourth", "echo fourth"]
        assert (await wire.result(wire.request("session/respond", {"session": victim, "prompt": "fifth"})))["text"] == "echo fifth"
        check_invariants(wire.log)
    store.close()


async def test_a_killed_shard_fails_asks_with_host_failed_and_keeps_the_actor(ray_instance: None) -> None:
    async with RaySystem(shards=1) as one_shard:
        ref = one_shard.spawn(Address("counter", "c"), Counter)
        with anyio.fail_after(HANG_GUARD):
            assert await ref.ask(3) == 3
            pid = await ref.ask_control("pid")
            stuck = ref.ask_nowait("slow")
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(HostFailed):
                await stuck.wait()
            assert await ref.ask(4) == 7  # restored from the checkpoint (3), not from zero
            assert await ref.ask_control("pid") != pid



async def test_closing_raises_every_on_stop_error_and_then_refuses_spawns(ray_instance: None) -> None:
    one_shard = RaySystem(shards=1)
    async with one_shard:
        for name in ("a", "b"):
            one_shard.spawn(Address("failing", name), Failing)
        echo = one_shard.spawn(Address("echo", "e"), Echo)
        with anyio.fail_after(HANG_GUARD):
            assert await echo.ask("hi") == ["hi", 1]
            with pytest.raises(ExceptionGroup) as info:
                await one_shard.aclose()
        assert [repr(error) for error in info.value.exceptions] == [repr(KeyError("on_stop failed"))] * 2
        assert one_shard.addresses() == []
        with pytest.raises(RuntimeError, match="cannot spawn echo:f: the system is closed"):
            one_shard.spawn(Address("echo", "f"), Echo)
    with pytest.raises(RuntimeError, match="a RaySystem can be entered only once"):
        await one_shard.__aenter__()

# --- model actors --------------------------------------------------------------------------------


def three_turns_an_hour() -> Any:
    """A scripted echo behind a quota of three requests an hour, waiting half a second for room."""
    from oam_actors.models import ScriptedModel, ScriptStep
    from oam_actors.models.pool import ScheduledModel
    from oam_actors.models.scheduler import QuotaLimits, QuotaScheduler

    limits = QuotaLimits(requests_per_window=3, window_seconds=3600)
    return ScheduledModel(ScriptedModel(fallback=ScriptStep.template("echo {prompt}")), QuotaScheduler(limits),
                          queue_seconds=(0.5, 0.5, 0.5))


async def test_a_model_actor_enforces_one_quota_for_sessions_on_every_shard(system: RaySystem) -> None:
    model = host_model("quota-test", three_turns_an_hour)
    try:
        async with open_wire(system) as wire:
            wire.bridge.system_model = lambda: model
            sessions = spread("session", 2)  # two sessions on each shard, one quota between them
            for address in sessions:  # one attempt per step: a refused step is not retried
                await wire.call("session/create", {"session": address.id, "options": {"maxAttempts": 1}})
            replies = [await wire.response(wire.request("session/respond", {"session": a.id, "prompt": a.id}))
                       for a in sessions]
        assert [r["result"]["text"] for r in replies[:3]] == [f"echo {a.id}" for a in sessions[:3]]
        assert replies[3]["error"]["data"]["code"] == "rate_limited"
        statistics = await model.statistics()
        assert (statistics.admitted, statistics.expired) == (3, 1)  # the scheduler's own record
    finally:
        assert stop_model("quota-test")
    assert not model_running("quota-test")  # stopped means gone: the name is free again


async def test_a_device_sessions_name_is_one_model_actor_for_sessions_on_every_shard(system: RaySystem) -> None:
    phone_config = PhoneConfig(first_token_latency_s=0.0, tokens_per_s=0.0, tool_call_rate=0.0)
    async with SimulatedPhone(phone_config) as phone, DeviceBackends() as devices:
        name = f"device:{phone.url}"
        spec = {"type": "device", "urls": [phone.url + "/"]}  # written as a client may: the same phone
        config = BridgeConfig(model_types=devices.model_types())
        try:
            async with open_wire(system, config=config) as wire:
                sessions = spread("session", 2)  # two on each shard, all first used at once
                for address in sessions:
                    await wire.call("session/create", {"session": address.id, "model": spec})
                turns = [wire.request("session/respond", {"session": a.id, "prompt": "Ale?"}) for a in sessions]
                answers = [await wire.response(turn) for turn in turns]
                bad = await wire.response(wire.request("session/create", {"session": "bad", "model": {
                    "type": "device", "urls": ["http://10.9.9.9:8765"]}}))
            hosted = RemoteModel(name, ModelCapabilities())
            with anyio.fail_after(HANG_GUARD):
                statistics = await hosted.statistics()
        finally:
            stopped = await anyio.to_thread.run_sync(stop_model, name)
    assert [a.get("error") for a in answers] == [None] * 4 and all(a["result"]["text"] for a in answers)
    assert stopped  # the one actor of that phone, hosted by the first shard to need it
    # Every session's step went through the one pool of that actor: one scheduler for the phone.
    assert statistics is not None and statistics.steps_ok == 4 == phone.statistics().admitted
    assert phone.statistics().refused == {}
    # A device that cannot be hosted is refused as on LocalSystem, naming the field.
    assert bad["error"]["code"] == -32602 and "model.urls" in bad["error"]["message"]
    assert "pickle" not in bad["error"]["message"]



async def test_sessions_naming_the_servers_own_phones_use_its_pools_model_actor(system: RaySystem) -> None:
    phone_config = PhoneConfig(first_token_latency_s=0.0, tokens_per_s=0.0, tool_call_rate=0.0)
    async with SimulatedPhone(phone_config) as phone:
        setup = create_model_setup(ModelConfig(devices=(phone.url,), coalesce=None), host=ClusterModel)
        async with setup.resources, setup.hosted:
            config = BridgeConfig(model_types=setup.model_types)
            async with open_wire(system, config=config) as wire:
                sessions = spread("session", 1)  # one on each shard
                for address in sessions:
                    await wire.call("session/create", {"session": address.id, "model": {
                        "type": "device", "urls": [phone.url + "/"]}})
                turns = [wire.request("session/respond", {"session": a.id, "prompt": "Ale?"}) for a in sessions]
                answers = [await wire.response(turn) for turn in turns]
            assert setup.status_model is not None
            with anyio.fail_after(HANG_GUARD):
                statistics = await setup.status_model().statistics()
    assert [a.get("error") for a in answers] == [None] * 2
    assert not model_running(f"device:{phone.url}")  # no second pool for the same phone
    assert statistics is not None and statistics.steps_ok == 2 == phone.statistics().admitted
