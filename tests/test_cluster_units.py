"""The cluster package's pure parts, without Ray running: the state store, what crosses the
boundary (errors, actors, messages, frames), the outlet relay, placement and checkpoints."""

from __future__ import annotations

import asyncio
import enum
import os
import pickle
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from oam_actors import AgentError, ErrorCode, ProtocolError, ToolCall
from oam_actors.cluster import MemoryStore, StateStore, shard_of
from oam_actors.cluster.frames import FrameProtocol, raw_frame
from oam_actors.cluster.endpoints import Endpoints, StandIns, provisional_ids
from oam_actors.cluster.link import ShardLink
from oam_actors.cluster.shard import Shard, sweep_stale_directories
from oam_actors.cluster.system import remove_orphaned_folders
from oam_actors.cluster.wire import (
    Answer,
    Ask,
    Done,
    Failure,
    Forward,
    Hello,
    Out,
    Saved,
    SharedRef,
    Spawn,
    Stop,
    ValueWriter,
    decode_items,
    decode_ops,
    dumps_actor,
    dumps_value,
    encode_items,
    encode_ops,
    loads_actor,
    loads_value,
)
from oam_actors.objects.crossing import OUTLETS, WORLD_REPLICATION, CallTool, Notify, OutletRelay, Release
from oam_actors.game import WorldState
from oam_actors.objects import WorldActor
from oam_actors.objects.world import WorldMerge, WorldRemove, WorldSet, WorldSubscribe
from oam_actors.runtime import (
    Actor,
    ActorStopped,
    Address,
    HostFailed,
    LocalSystem,
    MailboxFull,
    detached_copy,
    dumps_state,
    endpoint_kind,
    loads_state,
    replication_of,
    use_endpoint_references,
)

# --- the state store -------------------------------------------------------------------------------


def test_a_memory_store_puts_gets_replaces_and_deletes() -> None:
    store = MemoryStore()
    assert isinstance(store, StateStore)
    store.put_many([("session:a", b"1"), ("npc:b", b"2")])
    store.put_many([("session:a", b"3")])
    assert (store.get("session:a"), store.get("npc:b"), store.get("world:c")) == (b"3", b"2", None)
    store.delete("npc:b")
    store.delete("never:there")
    assert store.keys() == ["session:a"]
    store.close()


# --- placement -------------------------------------------------------------------------------------


def test_placement_is_stable_and_uses_every_shard() -> None:
    addresses = [Address("npc", f"n{i}") for i in range(64)]
    placed = [shard_of(address, 4) for address in addresses]
    assert placed == [shard_of(address, 4) for address in addresses]
    assert set(placed) == {0, 1, 2, 3}
    assert shard_of(Address("session", "guard"), 1) == 0


# --- errors across the boundary --------------------------------------------------------------------


def test_protocol_errors_cross_with_code_message_and_data() -> None:
    error = AgentError(ErrorCode.RATE_LIMITED, "Slow down.", retry_after=3)
    copy = pickle.loads(pickle.dumps(Failure.of(error))).to_exception()
    assert type(copy) is AgentError
    assert copy.to_wire() == error.to_wire()
    missing = Failure.of(ProtocolError(ErrorCode.SESSION_NOT_FOUND, "No.", session="a")).to_exception()
    assert (type(missing), missing.to_wire()) == (
        ProtocolError,
        {"code": -32020, "message": "No.", "data": {"code": "session_not_found", "session": "a"}},
    )


class _LateLimit(AgentError):
    """An AgentError subclass, as the scheduler raises for a spent deadline."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(ErrorCode.RATE_LIMITED, message, retry_after=retry_after, limit=30)


def test_a_rate_limit_crosses_with_its_retry_after_class_and_data() -> None:
    crossed = pickle.loads(pickle.dumps(Failure.of(AgentError(ErrorCode.RATE_LIMITED, retry_after=7.0))))
    assert crossed.to_exception().retry_after == 7.0  # the retry policy reads it: no retry, -32005
    late = Failure.of(_LateLimit("No room.", retry_after=2.5)).to_exception()
    assert type(late) is _LateLimit and late.retry_after == 2.5
    assert late.data()["limit"] == 30 and late.data()["retryAfterSeconds"] == 3


def test_a_protocol_error_that_does_not_pickle_crosses_by_its_fields_with_retry_after() -> None:
    error = AgentError(ErrorCode.RATE_LIMITED, "Slow down.", retry_after=4.0, limit=30, detail=lambda: None)
    failure = Failure.of(error)
    assert failure.pickled is None
    copy = failure.to_exception()
    assert (type(copy), copy.retry_after, copy.data()["limit"], copy.data()["retryAfterSeconds"]) == (
        AgentError, 4.0, 30, 4)


def test_runtime_and_builtin_errors_cross_pickled() -> None:
    stopped = Failure.of(ActorStopped(Address("npc", "gorm"))).to_exception()
    assert type(stopped) is ActorStopped and stopped.address == Address("npc", "gorm")
    full = Failure.of(MailboxFull(Address("npc", "gorm"), 3)).to_exception()
    assert str(full) == "npc:gorm: mailbox full (3 messages queued)"
    assert repr(Failure.of(ValueError("bad")).to_exception()) == "ValueError('bad')"


class _NeedsTwo(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(a + b)


def test_an_exception_that_does_not_load_crosses_as_text() -> None:
    copy = Failure.of(_NeedsTwo(1, 2)).to_exception()
    assert (type(copy), str(copy)) == (RuntimeError, "_NeedsTwo: 3")


# --- actors and messages across the boundary -------------------------------------------------------


class _Outlet:
    """A driver-side outlet that records what reaches it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.counter = 0

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.calls.append(("notify", method, params))

    def call_tool(self, params_head: dict[str, Any], request_id: Any, call: ToolCall, *, target: Address) -> str:
        self.counter += 1
        self.calls.append(("call", params_head, request_id, call.name, target))
        return f"t-{self.counter}"

    def release_tool(self, tool_request_id: str) -> None:
        self.calls.append(("release", tool_request_id))


class _Talker(Actor):
    def __init__(self, outlet: Any, greeting: str) -> None:
        self.outlet = outlet
        self.greeting = greeting
        self.shout = lambda text: text.upper()  # functions travel by value


def test_an_actor_crosses_with_its_outlet_kept_by_reference() -> None:
    outlet = _Outlet()
    blob = dumps_actor(_Talker(outlet, "hi"), lambda obj: 7 if obj is outlet else None)
    seen: list[int] = []
    actor = loads_actor(blob, lambda endpoint: seen.append(endpoint) or "the stand-in")
    assert isinstance(actor, _Talker)
    assert (actor.outlet, actor.greeting, actor.shout("hi"), seen) == ("the stand-in", "hi", "HI", [7])


def test_an_actor_whose_state_does_not_pickle_is_refused_by_name() -> None:
    actor = _Talker(None, "hi")
    actor.greeting = threading.Lock()  # type: ignore[assignment]
    with pytest.raises(TypeError, match="_Talker cannot move to a shard"):
        dumps_actor(actor, lambda obj: None)


def test_messages_cross_with_outlets_by_reference_and_refuse_functions() -> None:
    outlet = _Outlet()
    data = dumps_value({"prompt": "hi", "outlet": outlet}, lambda obj: 3 if obj is outlet else None)
    assert loads_value(data, lambda endpoint: f"outlet {endpoint}") == {"prompt": "hi", "outlet": "outlet 3"}
    with pytest.raises(TypeError, match="cannot cross to another process"):
        dumps_value(lambda: None)


class _Mood(enum.Enum):
    CALM = "calm"


class _Line(msgspec.Struct, frozen=True):
    text: str
    mood: _Mood = _Mood.CALM


def test_a_value_writer_asks_only_about_types_held_by_reference_and_pickles_the_rest_as_pickle_does() -> None:
    asked: list[Any] = []
    outlet = _Outlet()

    def reference(obj: Any) -> Any:
        asked.append(obj)
        return 3 if obj is outlet else None

    writer = ValueWriter(reference)
    value = {"line": _Line("hi"), "kinds": [_Line, _Mood, len], "pattern": re.compile("a+"), "at": Address("npc", "n1"),
             "outlet": outlet, "other": _Outlet()}
    for _ in range(2):  # the second time from the writer's table
        loaded = loads_value(writer.dumps(value), lambda endpoint: f"outlet {endpoint}")
        assert loaded["outlet"] == "outlet 3" and isinstance(loaded["other"], _Outlet)
        assert {key: loaded[key] for key in ("line", "kinds", "pattern", "at")} == {
            key: value[key] for key in ("line", "kinds", "pattern", "at")}
    assert asked == [outlet, value["other"]] * 2
    with pytest.raises(TypeError, match="cannot cross to another process"):
        writer.dumps({"f": lambda: None})
    assert loads_value(writer.dumps("after a failure")) == "after a failure"


def test_a_value_writer_pickles_a_value_its_reference_asks_for_while_it_pickles() -> None:
    outlet = _Outlet()
    writer = ValueWriter(lambda obj: writer.dumps(["inner", 1]) if obj is outlet else None)
    loaded = loads_value(writer.dumps({"outlet": outlet, "n": 2}), lambda ref: loads_value(ref))
    assert loaded == {"outlet": ["inner", 1], "n": 2}


def test_outlets_are_endpoints_by_their_methods() -> None:
    assert endpoint_kind(_Outlet()) is OUTLETS
    assert endpoint_kind(object()) is None and endpoint_kind("notify") is None
    assert pickle.loads(pickle.dumps(OUTLETS)) is OUTLETS  # references carry it by name


def test_the_driver_numbers_each_endpoint_once_and_relays_its_calls() -> None:
    endpoints, outlet = Endpoints(), _Outlet()
    ref = endpoints.reference(outlet)
    assert ref == (1, OUTLETS) and endpoints.reference(outlet) == ref and endpoints.reference("text") is None
    endpoints.deliver(Out.of(1, Notify("session/event", {"x": 1})))
    assert outlet.calls == [("notify", "session/event", {"x": 1})]
    del outlet  # a collected endpoint is forgotten: late calls go nowhere
    endpoints.deliver(Out.of(1, Notify("session/event", {})))
    assert endpoints.reference(_Outlet())[0] == 2



def test_in_one_process_a_checkpoint_keeps_no_endpoint() -> None:
    assert loads_state(dumps_state({"subscriber": _Outlet(), "path": "gate"})) == {"subscriber": None, "path": "gate"}


async def test_a_world_restored_by_another_process_notifies_its_subscribers_again() -> None:
    # A shard: its stand-ins are endpoint references in checkpoints.
    calls: list[tuple[str, int, Any]] = []
    use_endpoint_references(before := StandIns(lambda n, call: calls.append(("before", n, call)), provisional_ids("a")))
    saved: list[bytes] = []
    async with LocalSystem(checkpoint=lambda address, state: saved.append(state)) as system:
        world = system.spawn(Address("world", "village"), lambda: WorldActor(WorldState({"gate": "shut"})))
        await world.ask(WorldSubscribe("sub-1", "gate", before.resolve((4, OUTLETS))))
        await world.ask(WorldSet("gate", "ajar"))
    # The next process: a new stand-in for the same endpoint number, made from the checkpoint.
    use_endpoint_references(StandIns(lambda n, call: calls.append(("after", n, call)), provisional_ids("b")))
    restored = WorldActor(WorldState({}))
    restored.restore(saved[-1])
    async with LocalSystem() as system:
        world = system.spawn(Address("world", "village"), lambda: restored)
        assert (await world.ask(WorldSet("gate", "open")))["version"] == 2  # the document came back too
    assert [(when, n, call.params["subscription"], call.params["newValue"]) for when, n, call in calls] == [
        ("before", 4, "sub-1", "ajar"), ("after", 4, "sub-1", "open")]


async def test_a_world_hands_back_the_same_checkpoint_until_its_document_or_subscriptions_change() -> None:
    use_endpoint_references(stand_ins := StandIns(lambda n, call: None, provisional_ids("a")))
    async with LocalSystem() as system:
        actor = WorldActor(WorldState({"gate": "shut"}))
        world = system.spawn(Address("world", "village"), lambda: actor)
        first = actor.snapshot()
        assert actor.snapshot() is first
        actor.state.set("gate", "shut")  # no change: the version stays
        assert actor.snapshot() is first
        actor.state.set("gate", "open")  # written by an NPC sharing the document
        second = actor.snapshot()
        assert second is not first and actor.snapshot() is second
        await world.ask(WorldSubscribe("sub-1", "gate", stand_ins.resolve((4, OUTLETS))))
        third = actor.snapshot()
        assert third is not second and actor.snapshot() is third
    restored = WorldActor(WorldState({}))
    restored.restore(third)
    assert restored.state.to_json() == {"version": 1, "document": {"gate": "open"}}


def test_a_world_document_is_shared_and_leaves_as_a_copy_without_its_observers() -> None:
    document = WorldState({"gate": "open"})
    heard: list[Any] = []
    document.observe("", heard.append)
    copy = detached_copy(document)
    assert isinstance(copy, WorldState) and copy is not document
    assert (copy.to_json(), copy.version) == (document.to_json(), document.version)
    copy.set("gate", "shut")
    assert heard == [] and document.get("gate") == "open"
    assert detached_copy({"gate": "open"}) is None  # not a shared type: pickled by value

# --- the outlet relay ------------------------------------------------------------------------------


def test_tool_ids_are_the_connections_and_cancels_name_them() -> None:
    outlet = _Outlet()
    relay = OutletRelay(outlet)
    emitted: list[Any] = []
    shard_side = OUTLETS.stand_in(emitted.append, provisional_ids("inc1"))
    call = ToolCall("call_1", "open_gate", {"gate": "north"})
    target = Address("session", "a")
    provisional = shard_side.call_tool({"session": "a"}, 5, call, target=target)
    shard_side.notify("tool/cancel", {"session": "a", "requestId": 5, "id": provisional, "callId": "call_1"})
    shard_side.release_tool(provisional)
    shard_side.notify("session/event", {"session": "a", "requestId": 5, "event": {"type": "text"}})
    assert provisional == "inc1.1"
    assert [type(item) for item in emitted] == [CallTool, Notify, Release, Notify]
    for item in emitted:
        relay.deliver(item)
    assert outlet.calls == [
        ("call", {"session": "a"}, 5, "open_gate", target),
        ("notify", "tool/cancel", {"session": "a", "requestId": 5, "id": "t-1", "callId": "call_1"}),
        ("release", "t-1"),
        ("notify", "session/event", {"session": "a", "requestId": 5, "event": {"type": "text"}}),
    ]


def test_a_cancel_after_the_release_still_names_the_connections_id() -> None:
    outlet = _Outlet()
    relay = OutletRelay(outlet)
    relay.deliver(CallTool("inc1.1", {"npc": "gorm"}, "r1", ToolCall("call_1", "wave", {}), Address("npc", "gorm")))
    relay.deliver(Release("inc1.1"))  # the timeout's toolCallCompleted comes first
    relay.deliver(Notify("tool/cancel", {"npc": "gorm", "id": "inc1.1"}))
    assert outlet.calls[1:] == [("release", "t-1"), ("notify", "tool/cancel", {"npc": "gorm", "id": "t-1"})]


def test_a_relay_drops_calls_once_its_connection_is_gone() -> None:
    outlet = _Outlet()
    relay = OutletRelay(outlet)
    del outlet
    relay.deliver(Notify("session/event", {}))  # nothing to write to: no error


# --- frames ----------------------------------------------------------------------------------------


class _Transport(asyncio.Transport):
    """Enough of an asyncio transport for a protocol: records writes and whether it was aborted."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


async def test_frames_arrive_whole_in_order_and_batches_decode_as_they_were_sent() -> None:
    frames: list[bytes] = []
    protocol = FrameProtocol(frames.append, first_limit=5)
    protocol.connection_made(_Transport())
    address = Address("npc", "gorm")
    ops = [Spawn(address, b"actor", 8, None, []), Ask(7, address, b"message"), Stop(8, address)]
    failure = Failure.of(AgentError(ErrorCode.RATE_LIMITED, "slow down", retry_after=7.0, limit=30))
    items = [Saved(address, b"state"), Out(3, b"call"), Done(7, b"value"), Done(8, failure=failure)]
    whole = raw_frame(b"token") + raw_frame(encode_ops(ops)) + raw_frame(encode_items(items))
    for start in range(0, len(whole), 7):  # frames arrive split anywhere
        protocol.data_received(whole[start:start + 7])
    at_once: list[bytes] = []
    whole_read = FrameProtocol(at_once.append, first_limit=5)
    whole_read.connection_made(_Transport())
    whole_read.data_received(whole[:-3])  # two frames and most of the third in one read
    whole_read.data_received(whole[-3:])
    assert at_once == frames
    assert frames[0] == b"token"
    assert decode_ops(frames[1]) == ops
    decoded = decode_items(frames[2])
    assert decoded == items
    error = decoded[3].failure.to_exception()  # every field crosses: retryAfter, limit
    assert (type(error), error.retry_after, error.to_wire()) == (AgentError, 7.0, failure.to_exception().to_wire())


def test_error_data_messagepack_lacks_crosses_pickled_or_as_its_text() -> None:
    unpicklable = threading.Lock()
    failure = Failure("odd data", "internal_error", extra={"path": Path("/tmp/x"), "lock": unpicklable, "n": 3})
    (done,) = decode_items(encode_items([Done(1, failure=failure)]))
    assert done.failure.extra == {"path": Path("/tmp/x"), "lock": repr(unpicklable), "n": 3}


async def test_a_frame_over_the_limit_or_that_does_not_decode_ends_the_connection() -> None:
    frames: list[bytes] = []
    oversized = FrameProtocol(frames.append, first_limit=10)
    transport = _Transport()
    oversized.connection_made(transport)
    oversized.data_received(raw_frame(b"x" * 100))
    with pytest.raises(anyio.BrokenResourceError, match="exceeds 10"):
        await oversized.closed()
    assert frames == [] and transport.aborted

    garbled = FrameProtocol(decode_items)
    garbled.connection_made(_Transport())
    garbled.data_received(raw_frame(b"not MessagePack of items"))
    with pytest.raises(anyio.BrokenResourceError):
        await garbled.closed()

    ended = FrameProtocol(frames.append)
    ended.connection_made(_Transport())
    ended.connection_lost(None)
    with pytest.raises(anyio.EndOfStream):
        await ended.closed()


# --- checkpoints in the runtime --------------------------------------------------------------------


class _Counter(Actor):
    """Counts committed additions; ``peek`` messages do not commit."""

    def __init__(self) -> None:
        self.total = 0

    async def handle(self, message: Any) -> Any:
        if message == "peek":
            return self.total
        self.commit()
        self.total += message
        return self.total

    def snapshot(self) -> bytes:
        return str(self.total).encode()

    def restore(self, state: bytes) -> None:
        self.total = int(state)


async def test_local_system_checkpoints_committed_messages_before_their_replies() -> None:
    saved: list[tuple[str, bytes]] = []
    async with LocalSystem(checkpoint=lambda address, state: saved.append((str(address), state))) as system:
        ref = system.spawn(Address("counter", "c"), _Counter)
        reply = ref.ask_nowait(2)
        reply.add_done_callback(lambda value, error: saved.append(("reply", str(value).encode())))
        assert await reply.wait() == 2
        assert await ref.ask("peek") == 2
        assert await ref.ask(3) == 5
    assert saved == [("counter:c", b"2"), ("reply", b"2"), ("counter:c", b"5")]


async def test_without_a_checkpoint_sink_nothing_is_snapshotted() -> None:
    class Loud(_Counter):
        def snapshot(self) -> bytes:
            raise AssertionError("snapshot called")

    async with LocalSystem() as system:
        assert await system.spawn(Address("counter", "c"), Loud).ask(1) == 1


def test_a_restored_actor_continues_from_its_checkpoint() -> None:
    actor = _Counter()
    actor.restore(b"41")
    assert actor.total == 41 and actor.snapshot() == b"41"


# --- the command line ------------------------------------------------------------------------------


def _runtime_args(*argv: str) -> Any:
    import argparse

    from oam_actors.cli.runtime import add_runtime_arguments

    parser = argparse.ArgumentParser()
    add_runtime_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_runtime_options_choose_the_system() -> None:
    from oam_actors.cli.argtypes import UsageError
    from oam_actors.cli.runtime import DEFAULT_MAX_RUNNING_TURNS, system_from_args
    from oam_actors.cluster import RaySystem

    local = system_from_args(_runtime_args("--max-running-turns", "7"))()
    gate = local.gate_statistics() if isinstance(local, LocalSystem) else None
    assert gate is not None and gate.limit == 7
    system = system_from_args(_runtime_args("--runtime", "ray", "--address", "auto", "--shards", "3"))()
    assert isinstance(system, RaySystem) and (system.address, system.shards) == ("auto", 3)
    assert system.max_running == DEFAULT_MAX_RUNNING_TURNS
    with pytest.raises(UsageError, match="--address needs --runtime ray"):
        system_from_args(_runtime_args("--address", "auto"))


def test_exports() -> None:
    import oam_actors.cluster as cluster

    assert sorted(cluster.__all__) == sorted(set(cluster.__all__))
    for name in cluster.__all__:
        obj = getattr(cluster, name)
        if isinstance(obj, type):
            assert obj.__module__ == "oam_actors.cluster", name



# --- the driver's end of a shard, against a loopback server standing in for the shard -------------


class _Hosted:
    def __init__(self, address: Address) -> None:
        self.address, self.blob, self.max_queue, self.placed = address, b"actor", 8, None
        self.owners: list[Any] = []
        self.shares: list[Any] = []
        self.remote: list[bool] = []


class _Waiter:
    def __init__(self, address: Address) -> None:
        self.address, self.sent_to = address, None
        self.outcome: tuple[Any, BaseException | None] | None = None
        self.settled = anyio.Event()

    def settle(self, value: Any, error: BaseException | None) -> None:
        self.outcome = (value, error)
        self.settled.set()


async def test_a_link_sends_batches_and_answers_every_op_it_could_not_send() -> None:
    received: list[bytes] = []
    arrived = anyio.Event()

    def on_frame(payload: bytes) -> None:
        received.append(payload)
        if len(received) == 2:  # the token, then the batch
            arrived.set()

    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FrameProtocol(on_frame), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    class _Ping:
        async def remote(self) -> Hello:
            return Hello("first", 1, "node", "127.0.0.1", port, b"token")

    class _Handle:
        ping = _Ping()

    def load_state(address: Address) -> bytes | None:
        if address.id == "broken":
            raise OSError("the store is gone")
        return None

    link = ShardLink(0, _Handle(), load_state=load_state, save_states=lambda states: [],
                     not_durable=lambda address: None, deliver_out=lambda out: None, unhosted=lambda address, error: None,
                     replacement=lambda index: None, resolve_reply=lambda reference: reference)
    good, broken = _Hosted(Address("npc", "good")), _Hosted(Address("npc", "broken"))
    async with server, anyio.create_task_group() as tasks:
        tasks.start_soon(link.run)
        await link.up.wait()
        failing = _Waiter(broken.address)
        link.send(broken, Ask(1, broken.address, b"m"), failing)
        await failing.settled.wait()  # its checkpoint could not be read: answered, not lost
        assert isinstance(failing.outcome[1], OSError)
        link.send(good, Ask(2, good.address, b"m1"), _Waiter(good.address))
        link.send(good, Ask(3, good.address, b"m2"), _Waiter(good.address))
        await arrived.wait()
        tasks.cancel_scope.cancel()
    assert received[0] == b"token"
    assert decode_ops(received[1]) == [  # one frame: the actor hosted first, then its asks in order
        Spawn(good.address, b"actor", 8, None, []), Ask(2, good.address, b"m1"), Ask(3, good.address, b"m2")
    ]


@pytest.mark.parametrize(("driver_node", "family"), [("node-a", "unix"), ("node-b", "tcp")])
async def test_a_link_reaches_a_shard_on_its_node_over_a_private_unix_socket(driver_node: str, family: str) -> None:
    shard = Shard(0, "node-a", "127.0.0.1")

    class _Ping:
        async def remote(self) -> Hello:
            return await shard.hello()

    class _Handle:
        ping = _Ping()

    hello = await shard.hello()
    directory = Path(hello.path).parent
    assert directory.stat().st_mode & 0o777 == 0o700  # nobody else may connect
    link = ShardLink(0, _Handle(), load_state=lambda address: None, save_states=lambda states: [],
                     not_durable=lambda address: None, deliver_out=lambda out: None, unhosted=lambda address, error: None,
                     replacement=lambda index: None, resolve_reply=lambda reference: reference,
                     node_id=driver_node)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(link.run)
            await link.up.wait()
            waiter = _Waiter(Address("npc", "nobody"))
            link.send(None, Ask(1, waiter.address, dumps_value("hi")), waiter)
            await waiter.settled.wait()  # a round trip on the data path
            assert isinstance(waiter.outcome[1], ActorStopped)
            assert link._connection is not None
            peer = link._connection._transport.get_extra_info("peername")
            assert (peer == hello.path) if family == "unix" else (peer[1] == hello.port)
            assert not directory.exists()  # removed once its driver came, whichever way it came
            tasks.cancel_scope.cancel()
    finally:
        assert shard._root is not None
        shard._root.cancel()
        await asyncio.wait([shard._root])
    assert not directory.exists()


def test_a_batch_keeps_only_each_actors_latest_checkpoint() -> None:
    world, npc = Address("world", "w"), Address("npc", "n")
    shard = Shard(0, "node", "127.0.0.1")
    shard._saved(world, b"1")
    shard._saved(npc, b"1")
    shard._emit(Done(1))
    shard._saved(world, b"2")
    shard._emit(Done(2))
    assert shard._items == [Saved(world, b"2"), Saved(npc, b"1"), Done(1), Done(2)]


class _Owner(Actor):
    """An actor whose state others share: its snapshot is the same bytes until it changes."""

    def __init__(self) -> None:
        self.state = b"v1"

    def snapshot(self) -> bytes:
        return self.state


def test_a_holders_commit_checkpoints_its_owner_only_when_the_owner_hands_back_new_bytes() -> None:
    world, npc, owner = Address("world", "w"), Address("npc", "n"), _Owner()
    shard = Shard(0, "node", "127.0.0.1")
    shard._actors[world], shard._owners_of[npc], shard._owner_states[world] = owner, [world], None
    shard._saved(npc, b"1")
    assert shard._take_batch() == [Saved(npc, b"1"), Saved(world, b"v1")]
    shard._saved(npc, b"2")  # the owner's snapshot is the bytes it gave last time: not sent again
    assert shard._take_batch() == [Saved(npc, b"2")]
    owner.state = b"v2"
    shard._saved(npc, b"3")
    assert shard._take_batch() == [Saved(npc, b"3"), Saved(world, b"v2")]


class _Counted(_Owner):
    snapshots = 0

    def snapshot(self) -> bytes:
        self.snapshots += 1
        return self.state


async def test_an_actor_sharing_one_owners_object_twice_snapshots_that_owner_once_per_commit() -> None:
    world, npc, owner = Address("world", "w"), Address("npc", "n"), _Counted()
    shard = Shard(0, "node", "127.0.0.1")
    shares = [SharedRef(world, b"document"), SharedRef(world, b"document again")]
    async with LocalSystem() as system:
        shard._system, shard._actors[world] = system, owner
        shard._install(Spawn(npc, dumps_actor(_Counter(), lambda obj: None), 8, None, shares), {})
        shard._saved(npc, b"1")
    assert (shard._owners_of[npc], owner.snapshots) == ([world], 1)
    assert shard._take_batch() == [Saved(npc, b"1"), Saved(world, b"v1")]


def test_a_start_up_sweep_removes_only_socket_directories_whose_shard_is_gone(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(gone.stdout)  # exited: its number is free (reused only by chance, and then kept)
    stale_empty = tmp_path / f"oam-shard-{dead_pid}-abc"
    stale_socket = tmp_path / f"oam-shard-{dead_pid}-def"
    served = tmp_path / f"oam-shard-{dead_pid}-ghi"  # its number is free here, but someone listens
    mine = tmp_path / f"oam-shard-{os.getpid()}-jkl"
    unrelated = [tmp_path / "oam-shard-abcdefgh", tmp_path / f"other-{dead_pid}-x"]
    for directory in (stale_empty, stale_socket, served, mine, *unrelated):
        directory.mkdir()
    with socket.socket(socket.AF_UNIX) as closed, socket.socket(socket.AF_UNIX) as listening:
        closed.bind(str(stale_socket / "data"))  # bound, never listening: what a killed shard leaves
        listening.bind(str(served / "data"))
        listening.listen()
        removed = sweep_stale_directories(str(tmp_path))
    assert sorted(removed) == sorted([str(stale_empty), str(stale_socket)])
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        path.name for path in (served, mine, *unrelated))


def test_a_session_checkpoint_is_the_whole_state_however_its_history_changed() -> None:
    from oam_actors.agent import Agent, TextOutput
    from oam_actors.agent.transcript import PromptEntry, ResponseEntry, ToolUseEntry
    from oam_actors.models import ScriptedModel
    from oam_actors.objects.session import SessionActor, SessionState, model_progress

    agent = Agent(ScriptedModel.from_wire({"type": "scripted", "steps": [{"text": "hi"}]}))
    session = SessionActor(agent, None, model_name="scripted")  # type: ignore[arg-type]

    def check() -> None:
        whole = SessionState(agent.instructions, agent.context_note, [], agent.history, model_progress(agent.model))
        assert session.snapshot() == msgspec.json.encode(whole)

    check()  # empty
    for n in range(3):  # turns appended
        agent.history.extend([PromptEntry(f"q{n}"), ResponseEntry(f"a{n}", {"n": n} if n else None)])
        check()
    agent.history = [ResponseEntry("summary"), *agent.history[-2:]]  # compacted: a new list
    check()
    agent.history[0] = PromptEntry("changed in place")  # same length, same list
    check()
    agent.history.append(ToolUseEntry(ToolCall("call-1", "open_gate", {"gate": "north"}), TextOutput("opened")))
    check()
    del agent.history[1:]  # shorter
    check()
    agent.reset()
    check()
    restored = SessionActor(Agent(ScriptedModel.from_wire({"type": "scripted", "steps": [{"text": "hi"}]})), None,  # type: ignore[arg-type]
                            model_name="scripted")
    agent.history.extend([PromptEntry("q"), ResponseEntry("a")])
    restored.restore(session.snapshot())
    assert restored.agent.history == agent.history and restored.snapshot() == session.snapshot()


def test_a_world_replica_follows_its_owner_and_forwards_its_own_writes() -> None:
    owner = WorldState({"gate": {"open": False}, "quests": {}})
    copy = pickle.loads(pickle.dumps(detached_copy(owner)))  # as the owner's shard sends it
    replication = replication_of(owner)
    assert replication is WORLD_REPLICATION and pickle.loads(pickle.dumps(replication)) is WORLD_REPLICATION
    forwarded: list[Any] = []
    replica = replication.replica(copy, forwarded.append)
    pushed: list[Any] = []
    stop = replication.follow(owner, lambda change: pushed.append(pickle.loads(pickle.dumps(change))))
    owner.set("gate.open", True)
    owner.merge("quests", {"ring": "started", "sword": "found"})
    owner.remove("quests.sword")
    for change in pushed:
        replication.apply(replica, change)
    assert (replica.snapshot(), replica.version) == (owner.snapshot(), owner.version)
    # Its own writes: made at once (read back), and sent to the world as the method that makes them.
    replica.set("quests.ring", "done")
    replica.merge("gate", {"guard": "Bran"})
    replica.remove("gate.open")
    assert replica.get("quests.ring") == "done" and replica.get("gate") == {"guard": "Bran"}
    assert forwarded == [WorldSet("quests.ring", "done"), WorldMerge("gate", {"guard": "Bran"}), WorldRemove("gate.open")]
    stop()
    owner.set("gate.open", False)
    assert len(pushed) == 4  # nothing pushed once stopped
    replication.reset(replica, detached_copy(owner))
    assert (replica.snapshot(), replica.version) == (owner.snapshot(), owner.version)


def test_a_write_through_a_replica_is_sent_again_while_its_owners_process_dies_under_it() -> None:
    shard = Shard(0, "node", "127.0.0.1")
    share = SharedRef(Address("world", "w"), b"document")
    shard._write(share, WorldSet("gate.open", True))
    [written] = shard._writes[share]
    for _ in range(2):  # the owner's process dies before answering: the same write goes again
        [sent] = shard._take_batch()
        assert isinstance(sent, Forward) and pickle.loads(sent.message) == WorldSet("gate.open", True)
        shard._answer(Answer(sent.seq, failure=Failure.of(HostFailed(share.owner))))
        assert not written.done()
    [sent] = shard._take_batch()
    shard._answer(Answer(sent.seq, dumps_value({"version": 3})))
    assert written.done() and shard._writes[share] == []
    # Its owner's process dying on every try: the write fails, and the holders' replies with it.
    shard._write(share, WorldSet("gate.open", False))
    [written] = shard._writes[share]
    for _ in range(3):
        [sent] = shard._take_batch()
        shard._answer(Answer(sent.seq, failure=Failure.of(HostFailed(share.owner))))
    assert shard._take_batch() == [] and shard._writes[share] == []
    errors: list[BaseException | None] = []
    written.add_done_callback(lambda _, error: errors.append(error))
    assert [type(error) for error in errors] == [HostFailed]


def test_folders_of_private_instances_whose_owner_died_are_removed(tmp_path: Path) -> None:
    # A driver killed with SIGKILL cannot remove its private Ray folder; the next one does.
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
    orphaned, alive, foreign = (tmp_path / f"oamray-{name}" for name in ("orphaned", "alive", "foreign"))
    for folder in (orphaned, alive, foreign):
        (folder / "session_x").mkdir(parents=True)
    (orphaned / "owner.pid").write_text(finished.stdout.strip())
    (alive / "owner.pid").write_text(str(os.getpid()))
    assert remove_orphaned_folders(str(tmp_path)) == [str(orphaned)]
    assert not orphaned.exists() and alive.exists() and foreign.exists()
