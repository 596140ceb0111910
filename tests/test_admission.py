"""The admission gate: a bounded number of turns running at once, flows (connections) in turn,
each flow's in arrival order; and the fair queue and fair yields behind it.

Order, never timing: the gate's own bookkeeping on its tickets, and over a bridge the wire log
(a turn's first event comes after enough earlier turns have answered). The same burst runs on
RaySystem in test_cluster_ray.py; flooding connections over real sockets in test_serve_hostile.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest

from oam_actors import Bridge, GenerationRequest, ScriptedModel, ScriptStep, StepKind
from oam_actors.runtime import (
    Actor, ActorStopped, ActorSystem, Address, AdmissionGate, FairQueue, LocalSystem, MessageCancelled, fair_pause, flow,
)

HANG_GUARD = 30.0  # seconds; only to fail a hung test instead of blocking the suite


# --- the fair queue alone (pure) ------------------------------------------------------------------


def test_flows_are_served_in_turn_each_lowest_key_first() -> None:
    queue: FairQueue[str] = FairQueue()
    for key in range(4):
        queue.push("flood", key, f"flood-{key}")
        queue.push("other", key, f"other-{key}")
    queue.push("flood", -1, "flood-early")  # an earlier arrival (a resumed waiter) goes first in its flow
    assert (len(queue), queue.flows()) == (9, 2)
    served = [queue.pop() for _ in range(len(queue))]
    assert served == ["flood-early", "other-0", "flood-0", "other-1", "flood-1", "other-2", "flood-2", "other-3", "flood-3"]
    assert (len(queue), queue.flows()) == (0, 0)
    with pytest.raises(IndexError):
        queue.pop()


def test_a_flow_back_from_idle_is_served_next_then_takes_its_turns() -> None:
    queue: FairQueue[str] = FairQueue()
    for flow_name in ("a", "b", "c"):
        for key in range(100):
            queue.push(flow_name, key, flow_name)
    assert [queue.pop() for _ in range(4)] == ["a", "b", "c", "a"]
    queue.push("calm", 1000, "calm")
    queue.push("calm", 1001, "calm")
    # Not behind the 296 items the others hold: next, then one in each round like the others.
    assert [queue.pop() for _ in range(5)] == ["calm", "b", "c", "a", "calm"]


def test_a_flow_gains_nothing_by_coming_and_going() -> None:
    """One item at a time, pushed again as soon as it is served (a lone busy task), gets one
    item per round next to a flow holding a backlog, not every item."""
    queue: FairQueue[str] = FairQueue()
    for key in range(20):
        queue.push("crowd", key, "crowd")
    queue.push("lone", 0, "lone")
    served = []
    for key in range(1, 17):
        served.append(queue.pop())
        if served[-1] == "lone":
            queue.push("lone", key, "lone")
    assert served.count("lone") == served.count("crowd") == 8
    assert "lone, lone, lone" not in ", ".join(served)


def test_equal_keys_keep_push_order_and_items_are_never_compared() -> None:
    queue: FairQueue[object] = FairQueue()
    first, second = object(), object()  # objects without an order
    queue.push("f", 1, first)
    queue.push("f", 1, second)
    assert [queue.pop(), queue.pop()] == [first, second]


# --- the gate alone --------------------------------------------------------------------------------


async def test_a_freed_slot_goes_to_the_earliest_ticket_not_the_earliest_caller() -> None:
    gate = AdmissionGate(1)
    await gate.acquire(0)
    admitted: list[int] = []

    async def wait(ticket: int) -> None:
        await gate.acquire(ticket)
        admitted.append(ticket)

    async with anyio.create_task_group() as tasks:
        for ticket in (5, 3, 9, 1):  # asked in this order
            tasks.start_soon(wait, ticket)
        await anyio.wait_all_tasks_blocked()
        assert gate.statistics().waiting == 4
        for _ in range(4):
            gate.release()
            await anyio.wait_all_tasks_blocked()
    assert admitted == [1, 3, 5, 9]
    assert gate.statistics().running == 1  # the last one still holds it


async def test_a_cancelled_waiter_takes_no_slot() -> None:
    gate = AdmissionGate(1)
    await gate.acquire(0)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await gate.acquire(1)
    assert gate.statistics().waiting == 0
    gate.release()
    assert gate.statistics().running == 0
    await gate.acquire(2)  # free again: no wait
    assert gate.statistics().running == 1


async def test_a_waiter_cancelled_in_the_queue_is_skipped() -> None:
    gate = AdmissionGate(1)
    await gate.acquire(0)
    got: list[int] = []
    async with anyio.create_task_group() as tasks:
        first = anyio.CancelScope()

        async def cancelled_waiter() -> None:
            with first:
                await gate.acquire(1)
                got.append(1)

        async def waiter() -> None:
            await gate.acquire(2)
            got.append(2)

        tasks.start_soon(cancelled_waiter)
        tasks.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        first.cancel()  # ticket 1 leaves the queue ...
        await anyio.wait_all_tasks_blocked()
        assert gate.statistics().waiting == 1
        gate.release()  # ... so the slot goes to ticket 2
    assert got == [2]
    assert gate.statistics().running == 1


async def test_a_freed_slot_goes_to_the_flows_in_turn_not_to_the_earliest_backlog() -> None:
    gate = AdmissionGate(1)
    await gate.acquire(gate.next_ticket(), "flood")
    admitted: list[str] = []

    async def wait(ticket: int, flow_name: str) -> None:
        await gate.acquire(ticket, flow_name)
        admitted.append(flow_name)

    async with anyio.create_task_group() as tasks:
        for _ in range(10):  # a backlog of earlier tickets ...
            tasks.start_soon(wait, gate.next_ticket(), "flood")
            await anyio.wait_all_tasks_blocked()
        tasks.start_soon(wait, gate.next_ticket(), "calm")  # ... then one later ticket of another flow
        await anyio.wait_all_tasks_blocked()
        for _ in range(11):
            gate.release()
            await anyio.wait_all_tasks_blocked()
    assert admitted.index("calm") == 1  # one slot of the backlog's flow, then its turn
    assert gate.statistics() == msgspec.structs.replace(gate.statistics(), running=1, waiting=0, admitted=12)


async def test_a_ticket_waits_for_an_earlier_one_of_its_flow_still_on_its_way_and_no_other_flow_does() -> None:
    gate = AdmissionGate(3)
    on_its_way = gate.expect(gate.next_ticket(), "a")
    admitted: list[str] = []

    async def wait(ticket: int, flow_name: str, name: str) -> None:
        await gate.acquire(ticket, flow_name)
        admitted.append(name)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(wait, gate.next_ticket(), "a", "a-later")
        tasks.start_soon(wait, gate.next_ticket(), "b", "b")
        await anyio.wait_all_tasks_blocked()
        # Slots are free, yet a's later ticket waits; b's is not held by a's arrival.
        assert admitted == ["b"]
        assert (gate.statistics().running, gate.statistics().waiting) == (1, 1)
        tasks.start_soon(wait, on_its_way.ticket, "a", "a-first")
        await anyio.wait_all_tasks_blocked()
    assert admitted == ["b", "a-first", "a-later"]
    assert (gate.statistics().running, gate.statistics().waiting) == (3, 0)


async def test_an_arrival_that_never_reaches_the_gate_holds_its_flow_only_until_closed() -> None:
    """A message cancelled or finished before it asks for admission closes its arrival."""
    gate = AdmissionGate(1)
    dropped = gate.expect(gate.next_ticket(), "a")
    later = gate.expect(gate.next_ticket(), "a")
    admitted: list[int] = []

    async def wait(ticket: int) -> None:
        await gate.acquire(ticket, "a")
        admitted.append(ticket)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(wait, gate.next_ticket())
        await anyio.wait_all_tasks_blocked()
        tasks.start_soon(wait, later.ticket)  # reaches the gate, but behind the first
        await anyio.wait_all_tasks_blocked()
        assert admitted == [] and gate.statistics().waiting == 2
        dropped.close()
        dropped.close()  # a second close does nothing
        await anyio.wait_all_tasks_blocked()
        assert admitted == [later.ticket]
        gate.release()
        await anyio.wait_all_tasks_blocked()
    assert admitted == [later.ticket, later.ticket + 1]
    assert gate.statistics() == msgspec.structs.replace(gate.statistics(), running=1, waiting=0, admitted=2)


async def test_a_held_waiter_cancelled_leaves_nothing_behind() -> None:
    gate = AdmissionGate(1)
    arriving = gate.expect(gate.next_ticket(), "a")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await gate.acquire(gate.next_ticket(), "a")
    assert gate.statistics().waiting == 0
    arriving.close()
    await gate.acquire(gate.next_ticket(), "a")  # free, and nothing of the flow held any more
    assert (gate.statistics().running, gate.statistics().waiting) == (1, 0)


async def test_a_turn_cancelled_before_its_actor_runs_it_does_not_hold_its_connections_next_turn() -> None:
    async with LocalSystem(max_running=1) as system, open_wire(system) as wire:
        for name in ("first", "second"):
            await wire.result(await wire.request("session/create", {"session": name, "model": {"type": "scripted", "steps": SCRIPT}}))
        first = await wire.request("session/respond", {"session": "first", "prompt": "Go."})
        await wire.request("session/cancel", {"session": "first"})  # before its actor task ran it
        second = await wire.request("session/respond", {"session": "second", "prompt": "Go."})
        assert (await wire.wait_for(lambda m: m.get("id") == first))["error"]["data"]["code"] == "cancelled"
        assert (await wire.result(second))["text"] == "A reply in a few pieces."
        assert system.gate_statistics() == msgspec.structs.replace(system.gate_statistics(), running=0, waiting=0)


def test_the_limit_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AdmissionGate(0)
    with pytest.raises(ValueError, match="at least the admission limit 2"):
        AdmissionGate(2, open_limit=1)


async def test_a_flow_at_its_open_limit_resumes_its_paused_messages_and_holds_its_new_ones() -> None:
    gate = AdmissionGate(1, open_limit=2)
    opened: list[tuple[str, int]] = []

    async def open_(ticket: int, flow_name: str) -> None:
        await gate.acquire(ticket, flow_name, opening=True)
        opened.append((flow_name, ticket))

    await gate.acquire(0, "burst", opening=True)
    gate.release()  # paused (waiting for its client): still open
    await gate.acquire(1, "burst", opening=True)
    gate.release()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(open_, 2, "burst")  # a third message of the flow: held ...
        tasks.start_soon(open_, 3, "other")  # ... another flow is not
        await anyio.wait_all_tasks_blocked()
        assert opened == [("other", 3)]
        assert gate.statistics().waiting == 1
        gate.release()
        await gate.acquire(0, "burst")  # a paused message takes a slot again past the held one
        assert gate.statistics().running == 1
        gate.release()
        gate.finish("burst")  # ... and ends: the held one is admitted
        await anyio.wait_all_tasks_blocked()
    assert opened == [("other", 3), ("burst", 2)]


async def test_a_message_held_at_the_open_limit_and_cancelled_leaves_nothing_open() -> None:
    gate = AdmissionGate(1, open_limit=1)
    await gate.acquire(0, "burst", opening=True)
    gate.release()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await gate.acquire(1, "burst", opening=True)
    assert gate.statistics().waiting == 0
    gate.finish("burst")
    await gate.acquire(2, "burst", opening=True)  # nothing open: no wait
    assert gate.statistics().running == 1


# --- messages admitted before their handler starts ------------------------------------------------


class Job(msgspec.Struct):
    name: str


class Worker(Actor):
    """Runs a :class:`Job` holding a slot, taken before its handler starts, until ``go`` is set."""

    admitted_first = (Job,)

    def __init__(self, started: list[str], go: anyio.Event) -> None:
        self.started = started
        self.go = go

    async def handle(self, message: Any) -> Any:
        self.started.append(message.name)
        async with self.admission():
            await self.go.wait()
        return message.name


async def test_a_message_admitted_first_starts_only_once_it_holds_a_slot_and_leaves_nothing_when_cancelled() -> None:
    started: list[str] = []
    go = anyio.Event()
    with anyio.fail_after(HANG_GUARD):
        async with LocalSystem(max_running=1) as system:
            refs = [system.spawn(Address("npc", name), lambda: Worker(started, go)) for name in ("a", "b", "c")]
            await anyio.wait_all_tasks_blocked()
            with flow("wire"):
                replies = [ref.ask_nowait(Job(ref.address.id)) for ref in refs]
            await anyio.wait_all_tasks_blocked()
            # "a" holds the one slot; "b" and "c" wait at the gate with no handler started.
            assert started == ["a"]
            assert system.gate_statistics() == msgspec.structs.replace(system.gate_statistics(), running=1, waiting=2)
            assert replies[1].cancel()
            await anyio.wait_all_tasks_blocked()
            assert system.gate_statistics() == msgspec.structs.replace(system.gate_statistics(), running=1, waiting=1)
            with pytest.raises(MessageCancelled):
                await replies[1].wait()
            go.set()
            assert [await replies[0].wait(), await replies[2].wait()] == ["a", "c"]
            assert started == ["a", "c"]  # the cancelled job never ran
            assert system.gate_statistics() == msgspec.structs.replace(system.gate_statistics(), running=0, waiting=0)


async def test_a_message_waiting_for_its_slot_is_dropped_when_its_actor_stops() -> None:
    started: list[str] = []
    go = anyio.Event()
    with anyio.fail_after(HANG_GUARD):
        async with LocalSystem(max_running=1) as system:
            first, second = (system.spawn(Address("npc", name), lambda: Worker(started, go)) for name in ("a", "b"))
            await anyio.wait_all_tasks_blocked()
            running, waiting = first.ask_nowait(Job("a")), second.ask_nowait(Job("b"))
            await anyio.wait_all_tasks_blocked()
            await system.stop(second.address)
            with pytest.raises(ActorStopped):
                await waiting.wait()
            assert system.gate_statistics() == msgspec.structs.replace(system.gate_statistics(), running=1, waiting=0)
            go.set()
            assert await running.wait() == "a"
            assert started == ["a"]
            assert system.gate_statistics() == msgspec.structs.replace(system.gate_statistics(), running=0, waiting=0)


# --- turns over a bridge ---------------------------------------------------------------------------


class Wire:
    """An in-process bridge; ``log`` is every message it wrote, in order."""

    def __init__(self, system: ActorSystem) -> None:
        self.log: list[dict[str, Any]] = []
        self.bridge = Bridge(system, self.write)
        self._changed = anyio.Event()
        self._ids = 0

    async def write(self, data: bytes) -> None:
        self.log.extend(msgspec.json.decode(line) for line in data.split(b"\n"))
        self._changed.set()
        self._changed = anyio.Event()

    async def request(self, method: str, params: dict[str, Any]) -> int:
        self._ids += 1
        await self.bridge.receive(msgspec.json.encode({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}))
        return self._ids

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with anyio.fail_after(HANG_GUARD):
            while True:
                for message in self.log:
                    if predicate(message):
                        return message
                await self._changed.wait()

    async def result(self, request_id: int) -> Any:
        message = await self.wait_for(lambda m: m.get("id") == request_id and "method" not in m)
        assert "result" in message, message
        return message["result"]

    def answer(self, tool_request_id: str, output: Any) -> Any:
        reply = {"jsonrpc": "2.0", "id": tool_request_id, "result": {"output": output}}
        return self.bridge.receive(msgspec.json.encode(reply))


@asynccontextmanager
async def open_wire(system: ActorSystem) -> AsyncIterator[Wire]:
    wire = Wire(system)
    async with wire.bridge:
        yield wire


SCRIPT = [{"text": "A reply in a few pieces.", "chunks": 4}]


async def burst(wire: Wire, turns: int) -> list[int]:
    """One streamed turn on each of ``turns`` sessions, all sent before any is answered; the
    request ids in arrival order, once every turn has answered."""
    for n in range(turns):
        await wire.result(await wire.request("session/create", {"session": f"b{n}", "model": {"type": "scripted", "steps": SCRIPT}}))
    ids = [await wire.request("session/respond", {"session": f"b{n}", "prompt": "Go.", "stream": True}) for n in range(turns)]
    for request_id in ids:
        await wire.result(request_id)
    return ids


def assert_started_in_arrival_order(log: list[dict[str, Any]], ids: list[int], limit: int) -> None:
    """With ``limit`` turns at once, the turn that arrived ``j``-th (from 0) can only start once
    ``j - limit + 1`` earlier turns have answered: its first event comes after that many responses."""
    answered = 0
    first_event_after: dict[int, int] = {}
    for message in log:
        if "method" not in message and message.get("id") in ids:
            answered += 1
        elif message.get("method") == "session/event":
            first_event_after.setdefault(message["params"]["requestId"], answered)
    assert sorted(first_event_after) == sorted(ids)
    for position, request_id in enumerate(ids):
        assert first_event_after[request_id] >= position - limit + 1, (position, first_event_after)
    # Not vacuous: the last turns of the burst did wait for earlier answers.
    assert first_event_after[ids[-1]] >= len(ids) - limit


async def test_a_burst_of_turns_starts_in_arrival_order_a_few_at_a_time() -> None:
    async with LocalSystem(max_running=3) as system, open_wire(system) as wire:
        ids = await burst(wire, 12)
        assert_started_in_arrival_order(wire.log, ids, 3)


async def test_without_a_gate_every_turn_of_the_burst_starts_before_the_first_answers() -> None:
    async with LocalSystem() as system, open_wire(system) as wire:
        ids = await burst(wire, 12)
    with pytest.raises(AssertionError):
        assert_started_in_arrival_order(wire.log, ids, 3)


OPEN_GATE = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}


async def test_a_turn_waiting_for_its_client_gives_its_slot_up() -> None:
    async with LocalSystem(max_running=1) as system, open_wire(system) as wire:
        tool_script = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"template": "Done: {toolOutput}"}]
        await wire.result(await wire.request("session/create", {"session": "waits", "tools": [OPEN_GATE],
                                                                "model": {"type": "scripted", "steps": tool_script}}))
        await wire.result(await wire.request("session/create", {"session": "plain", "model": {"type": "scripted", "steps": SCRIPT}}))
        waiting = await wire.request("session/respond", {"session": "waits", "prompt": "Open it."})
        call = await wire.wait_for(lambda m: m.get("method") == "tool/call")
        plain = await wire.request("session/respond", {"session": "plain", "prompt": "Hello."})
        assert (await wire.result(plain))["text"] == "A reply in a few pieces."  # the only slot was free
        assert system.gate_statistics() is not None and system.gate_statistics().running == 0
        await wire.answer(call["id"], {"opened": True})
        assert (await wire.result(waiting))["text"] == 'Done: {"opened":true}'
        assert system.gate_statistics().running == 0


GROUNDED = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"template": "Done: {toolOutput}"}]


async def test_a_burst_with_client_tools_answers_its_first_turns_before_it_starts_them_all() -> None:
    """Twelve turns sent before any tool answer (a client whose answers queue behind its burst):
    a connection keeps at most its open limit of turns started and unfinished, so the first
    answers come before the later turns call their tools, not after every turn has."""
    async with LocalSystem(max_running=1) as system, open_wire(system) as wire:
        for n in range(12):
            await wire.result(await wire.request("session/create", {"session": f"g{n}", "tools": [OPEN_GATE],
                                                                    "model": {"type": "scripted", "steps": GROUNDED}}))
        ids = [await wire.request("session/respond", {"session": f"g{n}", "prompt": "Open it."}) for n in range(12)]
        answered: set[str] = set()
        with anyio.fail_after(HANG_GUARD):
            while not all(any(m.get("id") == i and "result" in m for m in wire.log) for i in ids):
                for message in [m for m in wire.log if m.get("method") == "tool/call" and m["id"] not in answered]:
                    answered.add(message["id"])
                    await wire.answer(message["id"], {"opened": True})
                await anyio.sleep(0)
    open_limit = 4  # OPEN_PER_SLOT per slot
    responses = tool_calls = 0
    answered_order = []
    for message in wire.log:
        if message.get("method") == "tool/call":
            tool_calls += 1
            # The k-th tool call (from 1) of the burst is written once k - open_limit turns have answered.
            assert responses >= tool_calls - open_limit, (tool_calls, responses)
        elif message.get("id") in ids:
            responses += 1
            answered_order.append(ids.index(message["id"]))
    assert (tool_calls, responses) == (12, 12)
    # Completion follows arrival within the open limit: the p-th answer is of one of the first p + open_limit turns.
    assert all(arrived < position + open_limit for position, arrived in enumerate(answered_order)), answered_order


# --- fair yields ------------------------------------------------------------------------------------


async def crowd_and_lone(busy: Callable[[str], Awaitable[None]]) -> None:
    """Ten tasks of flow "crowd" and one of flow "lone", each ``busy(flow)`` inside its flow."""

    async def run(flow_name: str) -> None:
        with flow(flow_name):
            await busy(flow_name)

    async with anyio.create_task_group() as tasks:
        for _ in range(10):
            tasks.start_soon(run, "crowd")
        tasks.start_soon(run, "lone")


async def test_busy_flows_share_the_loop_per_flow_not_per_task() -> None:
    """Ten busy tasks of one flow and one of another, each yielding between steps: under
    contention the lone task gets as many steps as the whole crowd, not a tenth of them."""
    steps = {"crowd": 0, "lone": 0}

    async def busy(flow_name: str) -> None:
        while steps["lone"] < 50:
            steps[flow_name] += 1
            await fair_pause(flow_name)

    await crowd_and_lone(busy)
    assert steps["crowd"] <= 3 * steps["lone"], steps  # a plain checkpoint would give the crowd ~10 x


async def test_a_scripted_models_streamed_pieces_share_the_loop_per_flow() -> None:
    """The same with a scripted model's streamed steps, whose yields between pieces let others
    run: a flood of streamed turns on one connection leaves another's stream its share."""
    model = ScriptedModel(fallback=ScriptStep.say("word " * 400, chunks=400))
    request = GenerationRequest(kind=StepKind.RESPOND, system="", prompt="", streamed=True)
    pieces = {"crowd": 0, "lone": 0}

    async def stream(flow_name: str) -> None:
        async for _ in model.stream(request):
            pieces[flow_name] += 1
            if pieces["lone"] >= 50:
                return

    await crowd_and_lone(stream)
    assert pieces["crowd"] <= 3 * pieces["lone"], pieces  # plain checkpoints gave the crowd ~10 x
