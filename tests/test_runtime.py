"""Behaviour of oam_actors.runtime on LocalSystem (real anyio; interleavings driven by Events)."""

from __future__ import annotations

import logging
import pickle
from collections import defaultdict
from typing import Any

import anyio
import pytest

import oam_actors.runtime as rt
from oam_actors.runtime import (
    Actor,
    ActorExists,
    ActorStatistics,
    ActorStopped,
    Address,
    LocalSystem,
    MailboxFull,
    MessageCancelled,
    RuntimeErrorBase,
)

NPC = Address("npc", "gorm")


class Probe(Actor):
    """A scriptable actor. Messages are tuples ``(verb, arg)``; events are keyed by ``arg``."""

    def __init__(self) -> None:
        self.log: list[Any] = []
        self.entered: defaultdict[str, anyio.Event] = defaultdict(anyio.Event)
        self.gates: defaultdict[str, anyio.Event] = defaultdict(anyio.Event)
        self.failures: list[Exception] = []
        self.stopped = False

    async def on_start(self) -> None:
        self.log.append("start")

    async def on_stop(self) -> None:
        self.stopped = True

    async def on_failure(self, exc: Exception) -> None:
        self.failures.append(exc)

    async def handle(self, message: Any) -> Any:
        verb, arg = message
        self.log.append(message)
        if verb == "echo":
            return arg
        if verb == "fail":
            raise ValueError(arg)
        self.entered[arg].set()
        if verb == "block":
            try:
                await self.gates[arg].wait()
            except anyio.get_cancelled_exc_class():
                self.log.append(("cancelled", arg))
                raise
            return arg
        if verb == "commit":
            self.commit()
            with anyio.CancelScope(shield=True):
                await self.gates[arg].wait()
            return f"committed {arg}"
        if verb == "late-commit":
            with anyio.CancelScope(shield=True):
                await self.gates[arg].wait()
            self.commit()
            return "unreachable"
        raise AssertionError(message)

    async def handle_control(self, message: Any) -> Any:
        verb, arg = message
        if verb == "peek":
            return list(self.log)
        if verb == "fail":
            raise KeyError(arg)
        if verb == "commit":
            self.commit()
        if verb == "block":
            self.entered[arg].set()
            await self.gates[arg].wait()
            return arg
        raise AssertionError(message)


def spawn_probe(system: LocalSystem, address: Address = NPC, **kwargs: Any) -> tuple[Probe, rt.ActorRef]:
    probe = Probe()
    return probe, system.spawn(address, lambda: probe, **kwargs)


async def outcome(reply: rt.Reply) -> Any:
    """The reply's value, or the type of the error it resolved with."""
    try:
        return await reply.wait()
    except Exception as exc:  # noqa: BLE001 - the error type is the outcome under test
        return type(exc)


# -- addresses and errors ---------------------------------------------------------------------


def test_address_str_parse_and_pickle() -> None:
    address = Address("session", "a:b")
    assert str(address) == "session:a:b"
    assert Address.parse("session:a:b") == address
    assert pickle.loads(pickle.dumps(address)) == address
    assert {address: 1}[Address("session", "a:b")] == 1
    with pytest.raises(ValueError):
        Address.parse("no-colon")


@pytest.mark.parametrize("error", [ActorStopped(NPC), ActorExists(NPC), MessageCancelled(NPC), MailboxFull(NPC, 3)])
def test_errors_carry_address_and_pickle(error: RuntimeErrorBase) -> None:
    assert isinstance(error, RuntimeErrorBase)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert copy.address == NPC
    assert str(copy) == str(error)
    assert str(error).startswith("npc:gorm: ")


def test_mailbox_full_message() -> None:
    assert str(MailboxFull(NPC, 3)) == "npc:gorm: mailbox full (3 messages queued)"


def test_exports() -> None:
    for name in rt.__all__:
        obj = getattr(rt, name)
        if isinstance(obj, type):
            assert obj.__module__ == "oam_actors.runtime", name
    assert sorted(rt.__all__) == sorted(set(rt.__all__))


# -- ordered lane ----------------------------------------------------------------------------


async def test_messages_sent_right_after_spawn_run_after_on_start_in_order() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        replies = [ref.ask_nowait(("echo", i)) for i in range(50)]
        assert ref.statistics().queued == 50  # queued synchronously, before any await
        assert [await r.wait() for r in replies] == list(range(50))
        assert probe.log == ["start"] + [("echo", i) for i in range(50)]


async def test_order_per_actor_holds_with_many_actors_interleaved() -> None:
    async with LocalSystem() as system:
        pairs = [spawn_probe(system, Address("npc", str(n))) for n in range(20)]
        replies = [(ref, ref.ask_nowait(("echo", (n, i)))) for i in range(30) for n, (_, ref) in enumerate(pairs)]
        for ref, reply in replies:
            await reply.wait()
        for n, (probe, _) in enumerate(pairs):
            assert probe.log == ["start"] + [("echo", (n, i)) for i in range(30)]


async def test_ask_returns_result() -> None:
    async with LocalSystem() as system:
        _, ref = spawn_probe(system)
        assert await ref.ask(("echo", {"a": 1})) == {"a": 1}


class Partner(Actor):
    """Handles one message by setting its own event and waiting for the partner's."""

    def __init__(self, mine: anyio.Event, theirs: anyio.Event) -> None:
        self.mine, self.theirs = mine, theirs

    async def handle(self, message: Any) -> Any:
        self.mine.set()
        await self.theirs.wait()
        return message


async def test_different_actors_run_concurrently() -> None:
    a_ready, b_ready = anyio.Event(), anyio.Event()
    async with LocalSystem() as system:
        a = system.spawn(Address("npc", "a"), lambda: Partner(a_ready, b_ready))
        b = system.spawn(Address("npc", "b"), lambda: Partner(b_ready, a_ready))
        ra, rb = a.ask_nowait("from a"), b.ask_nowait("from b")
        with anyio.fail_after(5):  # a deadlock guard, not a timing assertion
            assert (await ra.wait(), await rb.wait()) == ("from a", "from b")


# -- control lane ----------------------------------------------------------------------------


async def test_control_lane_is_served_while_ordered_lane_blocks() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        blocked = ref.ask_nowait(("block", "g"))
        queued = ref.ask_nowait(("echo", "after"))
        await probe.entered["g"].wait()
        assert await ref.ask_control(("peek", None)) == ["start", ("block", "g")]
        assert not blocked.done() and not queued.done()
        probe.gates["g"].set()
        assert (await blocked.wait(), await queued.wait()) == ("g", "after")


async def test_control_exception_reaches_only_its_caller() -> None:
    async with LocalSystem() as system:
        _, ref = spawn_probe(system)
        with pytest.raises(KeyError):
            await ref.ask_control(("fail", "x"))
        assert await ref.ask(("echo", 1)) == 1


class SlowStart(Actor):
    def __init__(self, gate: anyio.Event) -> None:
        self.gate = gate
        self.ready = False

    async def on_start(self) -> None:
        await self.gate.wait()
        self.ready = True

    async def handle_control(self, message: Any) -> Any:
        return self.ready


async def test_control_waits_for_on_start() -> None:
    gate = anyio.Event()
    async with LocalSystem() as system, anyio.create_task_group() as tg:
        ref = system.spawn(NPC, lambda: SlowStart(gate))
        answers: list[bool] = []

        async def ask() -> None:
            answers.append(await ref.ask_control("ready?"))

        tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        assert answers == []
        gate.set()
    assert answers == [True]


# -- cancellation -------------------------------------------------------------------------------


async def test_cancel_queued_resolves_in_queue_order_and_never_runs() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        first = ref.ask_nowait(("block", "g"))
        second = ref.ask_nowait(("echo", "second"))
        third = ref.ask_nowait(("echo", "third"))
        await probe.entered["g"].wait()
        assert second.cancel() is True
        assert second.cancel() is False  # already cancelled
        await anyio.wait_all_tasks_blocked()
        assert not second.done()  # waits for the message ahead of it
        probe.gates["g"].set()
        assert await outcome(first) == "g"
        assert await outcome(second) is MessageCancelled
        assert await outcome(third) == "third"
        assert ("echo", "second") not in probe.log


async def test_cancel_running_cancels_handler_and_next_message_runs() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        running = ref.ask_nowait(("block", "g"))
        after = ref.ask_nowait(("echo", "after"))
        await probe.entered["g"].wait()
        assert running.cancel() is True
        assert await outcome(running) is MessageCancelled
        assert ("cancelled", "g") in probe.log
        assert await after.wait() == "after"
        assert running.cancel() is False  # finished


async def test_every_running_message_stays_cancellable_after_one_was_cut_short() -> None:
    """Messages share a cancel scope until a cancel spends it: each cut-short message leaves the
    ones after it running to the end, and the next running one can be cut short as well."""
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        for round_ in range(3):
            running = ref.ask_nowait(("block", f"g{round_}"))
            after = [ref.ask_nowait(("echo", (round_, i))) for i in range(3)]
            await probe.entered[f"g{round_}"].wait()
            assert running.cancel() is True
            assert await outcome(running) is MessageCancelled
            assert [await reply.wait() for reply in after] == [(round_, i) for i in range(3)]
        assert ref.statistics().cancelled == 3 and ref.statistics().processed == 9


async def test_cancel_after_commit_is_a_no_op() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        reply = ref.ask_nowait(("commit", "g"))
        await probe.entered["g"].wait()
        assert reply.cancel() is False
        probe.gates["g"].set()
        assert await reply.wait() == "committed g"


async def test_commit_after_a_winning_cancel_raises_message_cancelled() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        reply = ref.ask_nowait(("late-commit", "g"))
        await probe.entered["g"].wait()
        assert reply.cancel() is True
        probe.gates["g"].set()
        assert await outcome(reply) is MessageCancelled
        assert ref.statistics().cancelled == 1


async def test_commit_outside_handle_is_an_error() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        with pytest.raises(RuntimeError):
            await ref.ask_control(("commit", None))
        with pytest.raises(RuntimeError):
            probe.commit()


async def test_cancel_all_counts_running_and_queued() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        assert ref.cancel_all() == 0
        replies = [ref.ask_nowait(("block", "g")), ref.ask_nowait(("echo", 1)), ref.ask_nowait(("echo", 2))]
        await probe.entered["g"].wait()
        assert ref.cancel_all() == 3
        assert ref.cancel_all() == 0
        assert [await outcome(r) for r in replies] == [MessageCancelled] * 3
        assert await ref.ask(("echo", "alive")) == "alive"


async def test_cancel_all_spares_a_committed_message() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        replies = [ref.ask_nowait(("commit", "g")), ref.ask_nowait(("echo", 1)), ref.ask_nowait(("echo", 2))]
        await probe.entered["g"].wait()
        assert ref.cancel_all() == 2
        probe.gates["g"].set()
        assert [await outcome(r) for r in replies] == ["committed g", MessageCancelled, MessageCancelled]


# -- supervision and backpressure --------------------------------------------------------------


async def test_failing_message_fails_only_its_reply() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system)
        bad = ref.ask_nowait(("fail", "boom"))
        good = ref.ask_nowait(("echo", "fine"))
        with pytest.raises(ValueError, match="boom") as info:
            await bad.wait()
        assert await good.wait() == "fine"
        assert probe.failures == [info.value]  # on_failure got the very exception wait() raised


async def test_told_failure_is_logged_and_actor_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async with LocalSystem() as system:
        _, ref = spawn_probe(system)
        with caplog.at_level(logging.ERROR, logger="oam_actors.runtime"):
            assert ref.tell_nowait(("fail", "told")) is None
            assert await ref.ask(("echo", 2)) == 2
        assert any("npc:gorm" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_mailbox_full_per_spawn_and_system_default() -> None:
    async with LocalSystem(max_queue=1) as system:
        probe, ref = spawn_probe(system, max_queue=2)
        blocked = ref.ask_nowait(("block", "g"))
        await probe.entered["g"].wait()  # the running message does not count
        ref.ask_nowait(("echo", 1))
        ref.tell_nowait(("echo", 2))
        with pytest.raises(MailboxFull) as info:
            ref.ask_nowait(("echo", 3))
        assert info.value.max_queue == 2
        other = system.spawn(Address("npc", "small"), Probe)
        other.tell_nowait(("echo", 1))
        with pytest.raises(MailboxFull):
            other.tell_nowait(("echo", 2))
        probe.gates["g"].set()
        assert await blocked.wait() == "g"
        with pytest.raises(ValueError):
            system.spawn(Address("npc", "zero"), Probe, max_queue=0)


# -- stop and lifecycle -------------------------------------------------------------------------


async def test_stop_resolves_every_pending_reply_then_frees_the_address() -> None:
    async with LocalSystem() as system, anyio.create_task_group() as tg:
        probe, ref = spawn_probe(system)
        replies = [ref.ask_nowait(("block", "g")), ref.ask_nowait(("echo", 1)), ref.ask_nowait(("echo", 2))]
        control_outcome: list[Any] = []

        async def control() -> None:
            try:
                await ref.ask_control(("block", "c"))
            except ActorStopped as exc:
                control_outcome.append(exc)

        tg.start_soon(control)
        await probe.entered["g"].wait()
        await probe.entered["c"].wait()
        assert await system.stop(NPC) is True
        assert [await outcome(r) for r in replies] == [ActorStopped] * 3
        assert [type(e) for e in control_outcome] == [ActorStopped]
        assert probe.stopped
        assert system.lookup(NPC) is None and system.addresses() == []
        assert ref.statistics().cancelled == 3
        with pytest.raises(ActorStopped):
            ref.ask_nowait(("echo", 3))
        with pytest.raises(ActorStopped):
            await ref.ask_control(("peek", None))
        assert await system.stop(NPC) is False
        _, new_ref = spawn_probe(system)
        assert await new_ref.ask(("echo", "again")) == "again"


async def test_stop_lets_a_committed_message_finish() -> None:
    async with LocalSystem() as system, anyio.create_task_group() as tg:
        probe, ref = spawn_probe(system)
        replies = [ref.ask_nowait(("commit", "g")), ref.ask_nowait(("echo", 1))]
        await probe.entered["g"].wait()
        tg.start_soon(system.stop, NPC)
        await anyio.wait_all_tasks_blocked()
        assert system.lookup(NPC) is ref  # still stopping: the address stays taken
        with pytest.raises(ActorExists):
            system.spawn(NPC, Probe)
        probe.gates["g"].set()
        assert [await outcome(r) for r in replies] == ["committed g", ActorStopped]


class FailingStart(Actor):
    async def on_start(self) -> None:
        raise OSError("no store")


async def test_failed_on_start_stops_actor_and_resolves_replies() -> None:
    async with LocalSystem() as system:
        ref = system.spawn(NPC, FailingStart)
        reply = ref.ask_nowait("hello")
        with pytest.raises(ActorStopped) as info:
            await reply.wait()
        assert isinstance(info.value.__cause__, OSError)
        assert system.lookup(NPC) is None
        with pytest.raises(ActorStopped):
            await ref.ask_control("anything")


class FailingStop(Actor):
    async def on_stop(self) -> None:
        raise OSError("flush failed")


async def test_failed_on_stop_is_raised_by_stop_and_address_is_freed() -> None:
    async with LocalSystem() as system:
        system.spawn(NPC, FailingStop)
        with pytest.raises(OSError, match="flush failed"):
            await system.stop(NPC)
        assert system.lookup(NPC) is None


async def test_leaving_the_system_stops_every_actor() -> None:
    probes: list[Probe] = []
    async with LocalSystem() as system:
        for n in range(3):
            probe, ref = spawn_probe(system, Address("npc", str(n)))
            probes.append(probe)
        pending = ref.ask_nowait(("block", "g"))
    assert all(p.stopped for p in probes)
    assert await outcome(pending) is ActorStopped
    with pytest.raises(RuntimeError):
        system.spawn(NPC, Probe)



async def test_closing_stops_every_actor_then_raises_their_on_stop_errors_together() -> None:
    system = LocalSystem()
    async with system:
        probe, _ = spawn_probe(system)
        for name in ("a", "b"):
            system.spawn(Address("failing", name), FailingStop)
        with pytest.raises(ExceptionGroup) as info:
            await system.aclose()
        assert [str(error) for error in info.value.exceptions] == ["flush failed", "flush failed"]
        assert probe.stopped and system.addresses() == []
        with pytest.raises(RuntimeError, match="cannot spawn npc:gorm: the system is closed"):
            system.spawn(NPC, Probe)
        await system.aclose()  # closed already: nothing more happens, leaving the block is fine


async def test_a_system_is_entered_once_and_one_closed_unopened_never() -> None:
    system = LocalSystem()
    async with system:
        pass
    with pytest.raises(RuntimeError, match="a LocalSystem can be entered only once"):
        await system.__aenter__()
    unopened = LocalSystem()
    await unopened.aclose()
    with pytest.raises(RuntimeError, match="entered only once"):
        await unopened.__aenter__()
    with pytest.raises(ValueError, match="max_queue must be at least 1, got 0"):
        LocalSystem(max_queue=0)

async def test_outer_cancellation_still_resolves_pending_replies() -> None:
    with anyio.CancelScope() as outer:
        async with LocalSystem() as system:
            probe, ref = spawn_probe(system)
            replies = [ref.ask_nowait(("block", "g")), ref.ask_nowait(("echo", 1))]
            await probe.entered["g"].wait()
            outer.cancel()
            await anyio.sleep_forever()
    assert all(r.done() for r in replies)
    assert [await outcome(r) for r in replies] == [ActorStopped, ActorStopped]


async def test_outer_cancellation_lets_a_committed_shielded_message_finish() -> None:
    with anyio.CancelScope() as outer:
        async with LocalSystem() as system:
            committed, ref = spawn_probe(system)
            other, other_ref = spawn_probe(system, Address("npc", "other"))
            replies = [ref.ask_nowait(("commit", "g")), other_ref.ask_nowait(("block", "h"))]
            await committed.entered["g"].wait()
            await other.entered["h"].wait()
            outer.cancel()
            committed.gates["g"].set()  # the shielded wait ends only now, after the cancel
            await anyio.sleep_forever()
    assert [await outcome(r) for r in replies] == ["committed g", ActorStopped]
    assert committed.stopped and other.stopped


# -- registry ------------------------------------------------------------------------------------


async def test_spawn_lookup_addresses_and_actor_exists() -> None:
    async with LocalSystem() as system:
        refs = [
            system.spawn(Address("npc", "b"), Probe),
            system.spawn(Address("world", "v"), Probe),
            system.spawn(Address("npc", "a"), Probe),
        ]
        assert system.addresses() == [Address("npc", "b"), Address("world", "v"), Address("npc", "a")]
        assert system.addresses("npc") == [Address("npc", "b"), Address("npc", "a")]
        assert system.lookup(Address("world", "v")) is refs[1]
        assert system.lookup(Address("world", "x")) is None
        with pytest.raises(ActorExists):
            system.spawn(Address("npc", "a"), Probe)
        with pytest.raises(TypeError):
            system.spawn(Address("npc", "c"), object)  # type: ignore[arg-type]
        probe = Probe()
        system.spawn(Address("npc", "d"), lambda: probe)
        assert probe.address == Address("npc", "d") and probe.system is system


async def test_spawn_needs_an_open_system() -> None:
    with pytest.raises(RuntimeError):
        LocalSystem().spawn(NPC, Probe)


async def test_statistics_count_each_outcome() -> None:
    async with LocalSystem() as system:
        probe, ref = spawn_probe(system, max_queue=8)
        await ref.ask(("echo", 1))
        await outcome(ref.ask_nowait(("fail", "x")))
        blocked = ref.ask_nowait(("block", "g"))
        queued = ref.ask_nowait(("echo", 2))
        await probe.entered["g"].wait()
        assert ref.statistics() == ActorStatistics(
            queued=1, running=1, processed=1, failed=1, cancelled=0, max_queue=8
        )
        queued.cancel()
        probe.gates["g"].set()
        await blocked.wait()
        await outcome(queued)
        assert ref.statistics() == ActorStatistics(
            queued=0, running=0, processed=2, failed=1, cancelled=1, max_queue=8
        )


class Quitter(Actor):
    async def handle(self, message: Any) -> Any:
        await self.system.stop(self.address)


async def test_an_actor_can_stop_itself_from_handle() -> None:
    async with LocalSystem() as system:
        ref = system.spawn(NPC, Quitter)
        first, second = ref.ask_nowait("quit"), ref.ask_nowait("never")
        assert [await outcome(first), await outcome(second)] == [ActorStopped, ActorStopped]
        assert system.lookup(NPC) is None
        assert isinstance(system, rt.ActorSystem)


async def test_lookup_answers_for_actors_elsewhere_and_spawn_and_hosted_see_only_this_systems() -> None:
    async with LocalSystem() as far:
        remote = far.spawn(NPC, Probe)
        asked: list[Address] = []

        def elsewhere(address: Address) -> Any:
            asked.append(address)
            return remote if address == NPC else None

        async with LocalSystem(elsewhere=elsewhere) as near:
            assert near.lookup(NPC) is remote and near.hosted(NPC) is None
            assert near.lookup(Address("npc", "nobody")) is None
            here = near.spawn(NPC, Probe)  # not this system's: free here
            assert near.lookup(NPC) is here and near.hosted(NPC) is here
            assert asked == [NPC, Address("npc", "nobody")]
            assert await remote.ask(("echo", "far")) == "far"
