"""The console in a real headless Chromium against a real ``oam-actors serve`` with a simulated
farm under load: what the page shows is what ``model/status`` and ``/metrics`` say; signing in
with the form and with a ``?token=`` link; the stream reconnecting to a restarted server.

Screenshots (1366×768) are written to ``$OAM_CONSOLE_SCREENSHOTS`` when set, else to the test's
temporary folder. Skipped where no Chromium is installed (``.ci/run`` installs it)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("websockets")

from browser import HANG_GUARD, HOW_TO_GET, Chromium, Page, chromium_path
from serve_process import ServeProcess, TcpPeer, metric

pytestmark = pytest.mark.skipif(chromium_path() is None, reason=HOW_TO_GET)

SECRET = "browser-s3cret"
WIDTH, HEIGHT = 1366, 768


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("OAM_CONSOLE_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    with Chromium.launch(tmp_path / "profile") as chromium:
        yield chromium


class Load:
    """Turns on the system model from ``sessions`` sessions, one wave after another, on one TCP
    connection, until :meth:`stop`; then every turn sent has been answered."""

    def __init__(self, peer: TcpPeer, sessions: int) -> None:
        self.peer = peer
        self.names = [f"npc{n}" for n in range(sessions)]
        for name in self.names:
            peer.call("session/create", {"session": name})
        self.waves = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            ids = [self.peer.request("session/respond", {"session": name, "prompt": f"Wave {self.waves}: hello"})
                   for name in self.names]
            for request_id in ids:
                self.peer.response(request_id)
            self.waves += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def shown(page: Page) -> dict[str, Any]:
    """What the page shows, read from its DOM (every figure carries its value as data-value)."""
    return page.evaluate("""(() => {
      const value = (root, key) => root.querySelector(`[data-key="${key}"]`)?.dataset.value;
      const devices = [...document.querySelectorAll('#device-table tbody tr')].map(row => ({
        name: row.dataset.device, state: value(row, 'state'), ok: Number(value(row, 'ok')),
        window: value(row, 'window')}));
      const pool = Object.fromEntries([...document.querySelectorAll('#pool [data-key]')]
        .map(f => [f.dataset.key, Number(f.dataset.value)]));
      const codes = Object.fromEntries([...document.querySelectorAll('#codes tbody tr[data-code]')]
        .map(r => [r.dataset.code, Number(value(r, 'count'))]));
      const objects = Object.fromEntries([...document.querySelectorAll('#objects-body tr[data-kind]')]
        .map(r => [r.dataset.kind, Number(value(r, 'live'))]));
      const tenants = Object.fromEntries([...document.querySelectorAll('#connections-body tr[data-tenant]')]
        .map(r => [r.dataset.tenant, Number(value(r, 'open'))]));
      return {link: document.getElementById('link').dataset.state, devices, pool, codes, objects, tenants,
              available: document.querySelector('#availability [data-key="available"]')?.dataset.value};
    })()""")


def sign_in_with_the_form(page: Page, base: str, token: str) -> None:
    page.evaluate(f"document.getElementById('token').value = {json.dumps(token)}")
    page.evaluate("document.getElementById('sign-in').requestSubmit()")


def test_the_page_shows_what_model_status_says_under_load(browser: Chromium, shots: Path) -> None:
    args = ["--model", "farm:3", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--token", f"ops={SECRET}"]
    with ServeProcess(args) as server, server.tcp(SECRET) as peer:
        base = server.http_base
        page = browser.page(WIDTH, HEIGHT)

        # Not signed in: the sign-in form, no data; the state and the stream refuse.
        page.navigate(base + "/console")
        assert page.evaluate("!!document.getElementById('sign-in')")
        assert "phone" not in page.evaluate("document.documentElement.outerHTML")
        assert page.status_of(base + "/console/state") == 401
        page.screenshot(shots / "console-sign-in.png")
        sign_in_with_the_form(page, base, "not-the-token")
        page.wait_for("document.getElementById('message').textContent.includes('not valid')")
        assert page.cookies(base + "/console") == []

        sign_in_with_the_form(page, base, SECRET)
        page.wait_for("document.getElementById('link')?.dataset.state === 'live'")
        (cookie,) = page.cookies(base + "/console")
        assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == ("oam_console", True, "Strict", "/console")
        assert "oam_console" not in page.evaluate("document.cookie")  # HttpOnly: no script reads it

        load = Load(peer, sessions=12)
        page.wait_for("Number(document.querySelector('#pool [data-key=\"stepsOk\"]')?.dataset.value) >= 12")
        page.wait_for("document.querySelectorAll('#sparks .spark').length >= 3")
        during = shown(page)
        page.screenshot(shots / "console-under-load.png")
        load.stop()

        # Once the load has stopped the counters hold still and the page catches up with them;
        # a device's state and learned limit may still move (a cool-down ends), so both sides are
        # read again until they agree (a page that never agrees fails at the hang guard).
        status, after = agreed(page, lambda: peer.call("model/status"))
        ok = int(metric(server.get("/metrics", SECRET)[2], 'oam_responses_total{code="ok"}'))
        page.wait_for(f"Number(document.querySelector('#codes tr[data-code=\"ok\"] [data-key=\"count\"]')?.dataset.value) === {ok}")
        page.screenshot(shots / "console-after-load.png")

    statistics = status["statistics"]
    assert load.waves >= 1 and during["link"] == "live"
    assert [d["name"] for d in during["devices"]] == [d["name"] for d in statistics["devices"]] == ["phone1", "phone2", "phone3"]
    assert statistics["stepsOk"] >= 12 * load.waves and after["pool"]["devices"] == 3
    assert after["objects"]["session"] == 12 and after["tenants"] == {"ops": 1}


def projection(status: dict[str, Any]) -> dict[str, Any]:
    """What the page must show of a model/status result (quota windows slide on while the page
    is read: their limits are compared, not their use)."""
    statistics = status["statistics"]
    return {
        "devices": [(d["name"], d["state"], d["ok"], str(d["requestsLimit"])) for d in statistics["devices"]],
        "pool": {key: statistics[key] for key in ("ready", "cooling", "dead", "stepsOk", "stepsFailed", "rerouted",
                                                  "quotaEventsAbsorbed", "quotaEventsSurfaced")},
        "available": str(status["availability"]["available"]).lower(),
    }


def projection_shown(page_state: dict[str, Any]) -> dict[str, Any]:
    return {
        "devices": [(d["name"], d["state"], d["ok"], d["window"].split("/")[1]) for d in page_state["devices"]],
        "pool": {key: page_state["pool"][key] for key in ("ready", "cooling", "dead", "stepsOk", "stepsFailed", "rerouted",
                                                          "quotaEventsAbsorbed", "quotaEventsSurfaced")},
        "available": page_state["available"],
    }


def agreed(page: Page, read_status: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A model/status result and the page's state once they show the same (see the caller)."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        status, page_state = read_status(), shown(page)
        if projection(status) == projection_shown(page_state):
            return status, page_state
        if time.monotonic() > deadline:
            assert projection_shown(page_state) == projection(status)
        time.sleep(0.2)


def test_a_token_link_signs_in_and_leaves_no_token_in_the_address(browser: Chromium) -> None:
    with ServeProcess(["--model", "farm:1", "--ws", "127.0.0.1:0", "--token", SECRET]) as server:
        page = browser.page(WIDTH, HEIGHT)
        page.navigate(f"{server.http_base}/console?token={SECRET}")
        page.wait_for("document.getElementById('link')?.dataset.state === 'live'")
        assert page.evaluate("location.href") == server.http_base + "/console"
        (cookie,) = page.cookies(server.http_base + "/console")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and SECRET not in cookie["value"]
        # Signing out clears the cookie: the page is the sign-in form again.
        page.evaluate("document.getElementById('sign-out').click()")
        page.wait_for("!!document.getElementById('sign-in')")
        assert page.cookies(server.http_base + "/console") == []


def test_the_stream_reconnects_to_a_restarted_server(browser: Chromium, shots: Path) -> None:
    first = ServeProcess(["--model", "farm:2", "--ws", "127.0.0.1:0"])  # no tokens: a loopback dev server
    port = first.http_base.rsplit(":", 1)[1]
    page = browser.page(WIDTH, HEIGHT)
    with first:
        page.navigate(first.http_base + "/console")
        page.wait_for("document.getElementById('link').dataset.state === 'live'")
        before = shown(page)
        assert first.stop() == 0
    page.wait_for("document.getElementById('link').dataset.state === 'reconnecting'")
    assert page.evaluate("document.getElementById('main').classList.contains('stale')")
    page.screenshot(shots / "console-reconnecting.png")
    with ServeProcess(["--model", "farm:3", "--ws", f"127.0.0.1:{port}"]) as second:
        page.wait_for("document.getElementById('link').dataset.state === 'live' && "
                      "document.querySelectorAll('#device-table tbody tr').length === 3")
        assert len(before["devices"]) == 2  # the first server's farm, then the second's
        assert not page.evaluate("document.getElementById('main').classList.contains('stale')")
        assert second.stop() == 0


ROUTING = {"tiers": [{"priority": "dialogue", "backends": ["farm", "openai"], "spillSeconds": 2.5}],
           "spend": {"openai": {"requests": 12, "dollars": 0.04}}}


def test_sections_the_page_does_not_know_are_shown_as_keys_and_values(browser: Chromium) -> None:
    """A section another feature adds to model/status (a routing table, spend) shows up without a
    console change: the page is handed the server's own view with one such section added."""
    with ServeProcess(["--model", "farm:1", "--ws", "127.0.0.1:0"]) as server:
        page = browser.page(WIDTH, HEIGHT)
        page.navigate(server.http_base + "/console")
        page.wait_for("document.getElementById('link').dataset.state === 'live'")
        shown = page.evaluate(f"""fetch('/console/state').then(r => r.json()).then(view => {{
          view.snapshot.model.routing = {json.dumps(ROUTING)};
          view.snapshot.model.statistics.spillovers = 3;
          render(view);
          const section = key => document.querySelector(`#extra [data-section="${{key}}"]`);
          return {{title: section('routing').querySelector('h2').textContent,
                   text: section('routing').textContent,
                   other: section('statistics').textContent}};
        }})""")
    assert shown["title"] == "Routing"
    for text in ("tiers", "dialogue", "farm, openai", "2.5", "spend", "openai", "12", "0.04"):
        assert text in shown["text"], text
    assert "spillovers" in shown["other"] and "3" in shown["other"]
