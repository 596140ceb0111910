"""The ordered writer: order, batching, closing, a broken peer, abandoning it, and the bytes it holds."""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
from anyio.lowlevel import checkpoint

from oam_actors.bridge.outbox import MESSAGE_OVERHEAD, Outbox, OutboxStatistics


class FakeWriter:
    """Records each write call; ``gate`` (when set) holds every write until it is opened."""

    def __init__(
        self, *, gated: bool = False, fail_on: int | None = None, error: BaseException | None = None
    ) -> None:
        self.calls: list[bytes] = []
        self.active = 0
        self.max_active = 0
        self._gated = gated
        self._gate = anyio.Event()
        self._fail_on = fail_on
        self._error = error or BrokenPipeError(32, "Broken pipe")

    def open_gate(self) -> None:
        self._gate.set()
        self._gated = False

    async def __call__(self, data: bytes) -> None:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self._fail_on is not None and len(self.calls) == self._fail_on:
                raise self._error
            self.calls.append(data)
            if self._gated:
                await self._gate.wait()
            await checkpoint()
        finally:
            self.active -= 1


def lines(writer: FakeWriter) -> list[bytes]:
    return [line for call in writer.calls for line in call.split(b"\n")]


async def test_messages_put_before_run_go_out_in_one_batch_in_order() -> None:
    writer = FakeWriter()
    outbox = Outbox(writer)
    for n in range(5):
        outbox.put_nowait(b"m%d" % n)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await outbox.aclose()
    assert writer.calls == [b"m0\nm1\nm2\nm3\nm4"]
    assert outbox.statistics() == OutboxStatistics(pending=0, written=5, dropped=0)


async def test_messages_pending_during_a_write_are_batched_into_the_next_write() -> None:
    writer = FakeWriter(gated=True)
    outbox = Outbox(writer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        outbox.put_nowait(b"first")
        await anyio.wait_all_tasks_blocked()
        assert writer.calls == [b"first"]  # a single message is written without joining
        for name in (b"a", b"b", b"c"):
            outbox.put_nowait(name)
        assert outbox.statistics() == OutboxStatistics(pending=3, written=0, dropped=0, pending_bytes=3 * (1 + MESSAGE_OVERHEAD) + 5 + MESSAGE_OVERHEAD)
        writer.open_gate()
        await outbox.aclose()
    assert writer.calls == [b"first", b"a\nb\nc"]
    assert writer.max_active == 1


async def test_order_is_put_order_across_many_producers() -> None:
    writer = FakeWriter()
    outbox = Outbox(writer)
    put: list[bytes] = []

    async def producer(name: str) -> None:
        for n in range(50):
            message = f"{name}{n}".encode()
            outbox.put_nowait(message)
            put.append(message)
            await checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        async with anyio.create_task_group() as producers:
            for name in "xyz":
                producers.start_soon(producer, name)
        await outbox.aclose()
    assert lines(writer) == put
    assert len(put) == 150 and writer.max_active == 1
    assert outbox.statistics().written == 150


async def test_aclose_flushes_then_run_returns_and_put_raises() -> None:
    writer = FakeWriter(gated=True)
    outbox = Outbox(writer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        outbox.put_nowait(b"1")
        await anyio.wait_all_tasks_blocked()
        outbox.put_nowait(b"2")
        tg.start_soon(outbox.aclose)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(anyio.ClosedResourceError):
            outbox.put_nowait(b"late")
        writer.open_gate()
    assert writer.calls == [b"1", b"2"]
    with pytest.raises(anyio.ClosedResourceError):
        outbox.put_nowait(b"later")


async def test_aclose_without_a_runner_returns_and_a_later_run_flushes() -> None:
    writer = FakeWriter()
    outbox = Outbox(writer)
    outbox.put_nowait(b"kept")
    await outbox.aclose()
    assert writer.calls == []
    assert outbox.statistics().pending == 1
    await outbox.run()
    assert writer.calls == [b"kept"]
    await outbox.aclose()  # idempotent


async def test_closing_an_idle_outbox_stops_run() -> None:
    outbox = Outbox(FakeWriter())
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await anyio.wait_all_tasks_blocked()
        await outbox.aclose()
    assert outbox.statistics() == OutboxStatistics(pending=0, written=0, dropped=0)


@pytest.mark.parametrize(
    "error", [BrokenPipeError(32, "Broken pipe"), anyio.BrokenResourceError(), ConnectionResetError()]
)
async def test_a_broken_writer_closes_the_outbox_and_drops_quietly(
    error: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    writer = FakeWriter(fail_on=1, error=error)
    outbox = Outbox(writer)
    outbox.put_nowait(b"ok")
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await anyio.wait_all_tasks_blocked()
        outbox.put_nowait(b"lost1")
        outbox.put_nowait(b"lost2")
    # run returned by itself: the task group exited without aclose.
    outbox.put_nowait(b"after")
    outbox.put_nowait(b"after2")
    await outbox.aclose()
    assert writer.calls == [b"ok"]
    assert outbox.statistics() == OutboxStatistics(pending=0, written=1, dropped=4)
    assert len([r for r in caplog.records if r.name == "oam_actors.bridge.outbox"]) == 1


async def test_other_writer_errors_propagate() -> None:
    outbox = Outbox(FakeWriter(fail_on=0, error=RuntimeError("bug")))
    outbox.put_nowait(b"x")
    with pytest.raises(RuntimeError, match="bug"):
        await outbox.run()


async def test_pending_bytes_count_queued_and_in_write_messages_until_written() -> None:
    writer = FakeWriter(gated=True)
    outbox = Outbox(writer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        outbox.put_nowait(b"x" * 100)
        await anyio.wait_all_tasks_blocked()
        outbox.put_nowait(b"y" * 10)
        # The batch in the write still holds its memory.
        assert outbox.pending_bytes == 110 + 2 * MESSAGE_OVERHEAD
        writer.open_gate()
        await outbox.aclose()
    assert outbox.pending_bytes == 0


async def test_batches_are_cut_at_max_batch_bytes() -> None:
    writer = FakeWriter()
    outbox = Outbox(writer, max_batch_bytes=200)
    for n in range(6):
        outbox.put_nowait(b"%d" % n * 50)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await outbox.aclose()
    # Each message counts 50 + MESSAGE_OVERHEAD bytes: two fit under 200, the third passes it.
    assert [call.count(b"\n") + 1 for call in writer.calls] == [2, 2, 2]
    assert lines(writer) == [b"%d" % n * 50 for n in range(6)]


async def test_wait_below_returns_once_writes_bring_pending_under_the_limit() -> None:
    writer = FakeWriter(gated=True)
    outbox = Outbox(writer, max_batch_bytes=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        for _ in range(4):
            outbox.put_nowait(b"z" * 100)
        waited = anyio.Event()

        async def waiter() -> None:
            await outbox.wait_below(2 * (100 + MESSAGE_OVERHEAD) + 1)
            waited.set()

        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert not waited.is_set()
        writer.open_gate()
        await waited.wait()
        assert outbox.pending_bytes <= 2 * (100 + MESSAGE_OVERHEAD)
        await outbox.aclose()


async def test_abandon_cancels_the_stuck_write_drops_everything_and_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = FakeWriter(gated=True)  # a peer that never reads
    outbox = Outbox(writer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        outbox.put_nowait(b"stuck")
        await anyio.wait_all_tasks_blocked()
        outbox.put_nowait(b"queued")
        tg.start_soon(outbox.wait_below, 1)
        await anyio.wait_all_tasks_blocked()
        outbox.abandon()
        await outbox.aclose()  # returns at once: nothing is flushed
    outbox.put_nowait(b"later")
    assert outbox.statistics() == OutboxStatistics(pending=0, written=0, dropped=3, pending_bytes=0)
    assert not [r for r in caplog.records if r.name == "oam_actors.bridge.outbox"]


async def test_run_twice_at_once_is_refused() -> None:
    outbox = Outbox(FakeWriter())
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(RuntimeError, match="already running"):
            await outbox.run()
        await outbox.aclose()


async def test_max_batch_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Outbox(FakeWriter(), max_batch_bytes=0)
