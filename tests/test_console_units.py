"""The console's pure parts (the traffic history read from counters, the sign-in cookie) and its
feed on a virtual clock."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from oam_actors import LocalSystem
from oam_actors.clock import ManualClock
from oam_actors.observability.metrics import ServerMetrics
from oam_actors.transports.auth import ANONYMOUS, Tenant, TokenTable
from oam_actors.transports.console import Console
from oam_actors.transports.console._history import Sample, TrafficHistory
from oam_actors.transports.console._signin import SignIns, cookie_header, same_origin
from oam_actors.transports.hub import Hub, ServePolicy


def sample(at: float, ok: float = 0, errors: float = 0, requests: float = 0, queued: int | None = None) -> Sample:
    return Sample(at, {"session/respond": requests}, {"ok": ok, "rate_limited": errors}, {"ok": ok}, queued=queued)


def test_points_are_differences_of_consecutive_samples() -> None:
    history = TrafficHistory(window=60)
    assert history.add(sample(0)) is None  # the first sample is only a baseline
    point = history.add(sample(2, ok=4, errors=1, requests=5, queued=3))
    assert point is not None
    assert (point.seconds, point.requests, point.errors, point.turns_ok, point.queued) == (2, 5, 1, 4, 3)
    assert history.add(sample(4, ok=4, errors=1, requests=5)).requests == 0  # type: ignore[union-attr]
    assert [p.at for p in history.points()] == [2, 4]


def test_totals_cover_the_window_only() -> None:
    history = TrafficHistory(window=10)
    for at in range(0, 31, 5):  # ok grows by 10 every 5 s
        history.add(sample(at, ok=2 * at))
    totals = history.totals()
    assert totals.seconds == 10 and totals.responses == {"ok": 20}
    assert [p.at for p in history.points()] == [25, 30]


def test_totals_put_the_largest_first_and_leave_zeros_out() -> None:
    history = TrafficHistory(window=60)
    history.add(Sample(0, {}, {"ok": 1, "a": 5}, {}))
    history.add(Sample(1, {}, {"ok": 9, "a": 5, "b": 2}, {}))
    assert list(history.totals().responses.items()) == [("ok", 8), ("b", 2)]


def test_a_cookie_signs_its_tenant_in_until_it_expires() -> None:
    clock = ManualClock(1000.0)
    sign_ins = SignIns(TokenTable.parse(["ops=s3cret"]), clock, max_age=60)
    value = sign_ins.issue(Tenant("ops"))
    assert "s3cret" not in value and sign_ins.tenant(value) == Tenant("ops")
    assert sign_ins.request_tenant(None, f"other=1; oam_console={value}") == Tenant("ops")
    clock.advance(60)
    assert sign_ins.tenant(value) is None


@pytest.mark.parametrize("change", [
    lambda v: v.replace(".ops.", ".root."),  # another tenant
    lambda v: "9" + v,  # a later expiry
    lambda v: v[:-2],  # a cut signature
    lambda v: "",
    lambda v: "garbage",
])
def test_an_altered_cookie_signs_nobody_in(change) -> None:  # type: ignore[no-untyped-def]
    sign_ins = SignIns(TokenTable.parse(["ops=s3cret", "root=other"]), ManualClock(0.0))
    assert sign_ins.tenant(change(sign_ins.issue(Tenant("ops")))) is None


def test_another_server_process_does_not_honour_the_cookie() -> None:
    tokens = TokenTable.parse(["ops=s3cret"])
    value = SignIns(tokens, ManualClock(0.0)).issue(Tenant("ops"))
    assert SignIns(tokens, ManualClock(0.0)).tenant(value) is None  # a new key per process


def test_bearer_tokens_and_the_open_console() -> None:
    sign_ins = SignIns(TokenTable.parse(["ops=s3cret"]), ManualClock(0.0))
    assert sign_ins.request_tenant("Bearer s3cret", None) == Tenant("ops")
    assert sign_ins.request_tenant("Bearer wrong", None) is None
    assert sign_ins.request_tenant(None, 'bad"cookie') is None
    assert SignIns(TokenTable(), ManualClock(0.0)).request_tenant(None, None) == ANONYMOUS


def test_cookie_flags_and_origins() -> None:
    assert cookie_header("v", 0) == "oam_console=v; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict"
    assert same_origin(None, "127.0.0.1:8080")  # not a cross-origin browser request
    assert same_origin("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert not same_origin("http://127.0.0.1:9999", "127.0.0.1:8080")
    assert not same_origin("null", "127.0.0.1:8080")


# --- the feed on a virtual clock ---------------------------------------------------------------

async def test_the_feed_samples_on_the_hubs_clock_and_a_slow_viewer_gets_the_latest_tick() -> None:
    clock = ManualClock()
    received: list[dict] = []
    reading = anyio.Event()

    async def slow_send(text: str) -> None:
        received.append(msgspec.json.decode(text))
        if len(received) > 1:
            await reading.wait()  # the viewer stops reading after its first tick

    async def advance(seconds: float) -> None:
        await anyio.wait_all_tasks_blocked()
        clock.advance(seconds)
        await anyio.wait_all_tasks_blocked()

    async with LocalSystem() as system, anyio.create_task_group() as tasks:
        hub = Hub(system, ServePolicy(), clock=clock, metrics=ServerMetrics())
        console = Console(hub, interval=1.0, window=3.0)
        tasks.start_soon(console.run)
        tasks.start_soon(console.serve_viewer, slow_send)
        for second in range(5):
            hub.metrics.requests.inc(second + 1, method="ping")  # type: ignore[union-attr]
            hub.metrics.responses.inc(second + 1, code="ok" if second % 2 else "bad_request")  # type: ignore[union-attr]
            await advance(1.0)
        view = await console.view()
        reading.set()
        await anyio.wait_all_tasks_blocked()
        tasks.cancel_scope.cancel()

    # Ticks at 0..5 s; the window keeps 3 s of points: requests 3, 4 and 5 in them.
    assert [(p.at, p.requests, p.errors) for p in view["points"]] == [(3.0, 3, 3), (4.0, 4, 0), (5.0, 5, 5)]
    assert view["totals"].responses == {"bad_request": 8, "ok": 4}
    assert view["snapshot"]["model"] is None and view["snapshot"]["server"]["viewers"] == 1
    # The viewer: its view, the first tick, then (after reading again) only the newest tick.
    assert "append" not in received[0] and received[1]["append"] is True
    assert len(received) == 3 and received[2]["points"][0]["at"] == 5.0
