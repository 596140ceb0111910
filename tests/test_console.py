"""The operator's console over HTTP and WebSocket against a real ``oam-actors serve``: who may see
it (tokens, the sign-in cookie, other origins), what the state holds, and ``--console``'s own port.
The page itself, in a real browser, is tests/test_console_browser.py."""

from __future__ import annotations

import json
import socket
import urllib.error
from contextlib import ExitStack
import urllib.request
from collections.abc import Iterator
from http.cookies import SimpleCookie
from typing import Any

import pytest

pytest.importorskip("websockets")

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from serve_process import HANG_GUARD, ServeProcess, metric, run_serve

TOKEN = "ops=console-s3cret"
SECRET = "console-s3cret"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def http(base: str, path: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """Status, headers (last of each name; ``Set-Cookie`` too) and body, redirects not followed."""
    request = urllib.request.Request(base + path, method=method, headers=headers or {},
                                     data=b"" if method == "POST" else None)
    try:
        with _opener.open(request, timeout=HANG_GUARD) as response:
            return response.status, dict(response.headers.items()), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read().decode()


def cookie_of(headers: dict[str, str]) -> SimpleCookie:
    jar = SimpleCookie()
    jar.load(headers["Set-Cookie"])
    return jar


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with ServeProcess(["--model", "farm:2", "--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--token", TOKEN]) as process:
        yield process
        assert process.stop() == 0, process.stderr


def live_url(server: ServeProcess) -> str:
    return server.http_base.replace("http://", "ws://") + "/console/live"


def test_without_a_token_everything_is_401_and_shows_no_data(server: ServeProcess) -> None:
    status, headers, body = http(server.http_base, "/console")
    assert status == 401 and headers["Content-Type"].startswith("text/html")
    assert 'id="sign-in"' in body and "phone" not in body and "statistics" not in body
    for path in ("/console/state", "/console?token=wrong", "/console/state?token=" + SECRET):
        status, headers, body = http(server.http_base, path)
        assert status == 401, path
        assert "phone" not in body and "ops" not in body
    status, headers, _ = http(server.http_base, "/console/state", headers={"Cookie": "oam_console=4102444800.ops.00"})
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    with pytest.raises(InvalidStatus) as refused:
        connect(live_url(server), proxy=None, open_timeout=HANG_GUARD)
    assert refused.value.response.status_code == 401
    assert b"phone" not in refused.value.response.body


def test_the_sign_in_post_sets_a_strict_http_only_cookie_that_opens_state_and_stream(server: ServeProcess) -> None:
    status, headers, _ = http(server.http_base, "/console/login", method="POST", headers={"Authorization": "Bearer nope"})
    assert status == 401 and "Set-Cookie" not in headers
    status, headers, _ = http(server.http_base, "/console/login", method="POST",
                              headers={"Authorization": f"Bearer {SECRET}", "Origin": server.http_base})
    assert status == 204
    cookie = cookie_of(headers)["oam_console"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/console"
    assert SECRET not in cookie.value  # a signed sign-in, not the token itself
    sent = {"Cookie": f"oam_console={cookie.value}"}
    status, _, body = http(server.http_base, "/console/state", headers=sent)
    assert status == 200
    state = json.loads(body)
    assert [d["name"] for d in state["snapshot"]["model"]["statistics"]["devices"]] == ["phone1", "phone2"]
    with connect(live_url(server), additional_headers=sent, proxy=None, open_timeout=HANG_GUARD) as stream:
        first = json.loads(stream.recv(timeout=HANG_GUARD))
        assert "append" not in first and first["snapshot"]["model"]["availability"]["available"] is True
        assert json.loads(stream.recv(timeout=HANG_GUARD))["append"] is True  # then one message per tick
    tampered = cookie.value[:-1] + ("0" if cookie.value[-1] != "0" else "1")
    assert http(server.http_base, "/console/state", headers={"Cookie": f"oam_console={tampered}"})[0] == 401


def test_a_token_link_sets_the_cookie_and_redirects_the_token_out_of_the_url(server: ServeProcess) -> None:
    status, headers, _ = http(server.http_base, f"/console?token={SECRET}")
    assert status == 303 and headers["Location"] == "/console"
    cookie = cookie_of(headers)["oam_console"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    status, _, body = http(server.http_base, "/console", headers={"Cookie": f"oam_console={cookie.value}"})
    assert status == 200 and 'id="devices"' in body


def test_a_bearer_token_opens_the_console_as_it_opens_metrics(server: ServeProcess) -> None:
    status, _, body = http(server.http_base, "/console/state", headers={"Authorization": f"Bearer {SECRET}"})
    assert status == 200 and json.loads(body)["snapshot"]["server"]["maxConnections"] == 256


def test_requests_from_another_origin_are_refused(server: ServeProcess) -> None:
    """Another port of the same host is the same site: SameSite does not stop its page."""
    evil = {"Authorization": f"Bearer {SECRET}", "Origin": "http://127.0.0.1:1"}
    assert http(server.http_base, "/console/login", method="POST", headers=evil)[0] == 403
    with pytest.raises(InvalidStatus) as refused:
        connect(live_url(server), additional_headers=evil, proxy=None, open_timeout=HANG_GUARD)
    assert refused.value.response.status_code == 403


def test_sign_out_clears_the_cookie(server: ServeProcess) -> None:
    status, headers, _ = http(server.http_base, "/console/logout", method="POST")
    assert status == 204 and cookie_of(headers)["oam_console"]["max-age"] == "0"


def test_static_files_need_no_sign_in_and_nothing_else_is_served(server: ServeProcess) -> None:
    status, headers, body = http(server.http_base, "/console/static/console.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript") and "WebSocket" in body
    for path in ("/console/static/../state", "/console/static/login.html", "/console/nope", "/console/live/"):
        assert http(server.http_base, path, headers={"Authorization": f"Bearer {SECRET}"})[0] == 404, path
    assert http(server.http_base, "/console/login")[0] == 405
    status, headers, _ = http(server.http_base, "/console/")
    assert (status, headers["Location"]) == (303, "/console")


def test_tenants_and_objects_are_the_hubs_and_the_scrapes(server: ServeProcess) -> None:
    bearer = {"Authorization": f"Bearer {SECRET}"}
    with server.tcp(SECRET) as peer:
        peer.call("session/create", {"session": "a"})
        peer.call("session/create", {"session": "b"})
        state = json.loads(http(server.http_base, "/console/state", headers=bearer)[2])["snapshot"]["server"]
        scrape = http(server.http_base, "/metrics", headers=bearer)[2]
    assert state["tenants"] == {"ops": 1} and metric(scrape, 'oam_tenant_connections{tenant="ops"}') == 1
    assert state["objects"]["session"] == {"live": 2, "queued": 0}
    assert state["connections"]["tcp"] == metric(scrape, 'oam_connections{transport="tcp"}') == 1


def test_console_on_a_port_of_its_own_and_not_on_the_ws_port() -> None:
    with ServeProcess(["--model", "scripted", "--ws", "127.0.0.1:0", "--console", "127.0.0.1:0"]) as process:
        assert process.console_url is not None and process.console_url.endswith("/console")
        base = process.console_url.removesuffix("/console")
        status, _, body = http(base, "/console/state")  # no tokens: a loopback dev server is open
        assert status == 200 and json.loads(body)["snapshot"]["model"] is None
        assert http(base, "/ws")[0] == 404 and http(base, "/health")[0] == 200
        assert http(process.http_base, "/console")[0] == 404
        assert process.stop() == 0


def test_an_exposed_console_needs_a_token_and_a_taken_port_is_one_line() -> None:
    result = run_serve(["--model", "scripted", "--console", "0.0.0.0:0"])
    assert result.returncode == 2 and "requires a bearer token" in result.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = run_serve(["--model", "scripted", "--console", f"127.0.0.1:{port}"])
    assert busy.returncode == 2 and busy.stderr.strip().splitlines() == [
        f"oam-actors serve: error: --console 127.0.0.1:{port}: cannot listen there: Address already in use"]
    assert "Traceback" not in result.stderr + busy.stderr


def test_the_scrape_copies_the_same_model_status_the_console_shows(server: ServeProcess) -> None:
    bearer = {"Authorization": f"Bearer {SECRET}"}
    with server.tcp(SECRET) as peer:
        peer.call("session/create", {"session": "scraped"})
        peer.call("session/respond", {"session": "scraped", "prompt": "Hello"})
        statistics = peer.call("model/status")["statistics"]
        scrape = http(server.http_base, "/metrics", headers=bearer)[2]
    shown = json.loads(http(server.http_base, "/console/state", headers=bearer)[2])["snapshot"]["model"]["statistics"]
    for device in statistics["devices"]:
        name = device["name"]
        assert metric(scrape, f'oam_device_state{{device="{name}",state="{device["state"]}"}}') == 1
        assert metric(scrape, f'oam_device_steps_total{{device="{name}",outcome="ok"}}') == device["ok"]
        assert metric(scrape, f'oam_device_window_limit{{device="{name}"}}') == device["requestsLimit"]
    assert metric(scrape, 'oam_model_steps_total{outcome="ok"}') == statistics["stepsOk"] == shown["stepsOk"] >= 1
    assert metric(scrape, "oam_coalesce_items_total") == statistics["coalescing"]["items"]
    assert metric(scrape, 'oam_model_queued{priority="dialogue"}') == statistics["queuedByPriority"]["dialogue"]
    generating = statistics["generatingByPriority"]["dialogue"]
    assert generating > 0 and metric(scrape, 'oam_model_generating_seconds_total{priority="dialogue"}') == generating


def test_a_non_editable_install_ships_the_page() -> None:
    """The page's files are package data (pyproject.toml), so a wheel carries them."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert data["oam_actors.transports.console"] == ["static/*"]
    static = root / "oam_actors" / "transports" / "console" / "static"
    assert sorted(p.name for p in static.iterdir()) == ["console.css", "console.html", "console.js", "login.html", "login.js"]


def test_viewers_beyond_the_limit_are_closed_with_try_again_later(server: ServeProcess) -> None:
    from oam_actors.transports.console._feed import MAX_VIEWERS

    bearer = {"Authorization": f"Bearer {SECRET}"}

    def viewer(stack: ExitStack) -> ClientConnection:
        return stack.enter_context(connect(live_url(server), additional_headers=bearer, proxy=None,
                                           open_timeout=HANG_GUARD))

    with ExitStack() as stack:
        viewers = [viewer(stack) for _ in range(MAX_VIEWERS + 1)]
        for watching in viewers[:MAX_VIEWERS]:
            assert "snapshot" in json.loads(watching.recv(timeout=HANG_GUARD))  # each has its view
        with pytest.raises(ConnectionClosed):
            viewers[MAX_VIEWERS].recv(timeout=HANG_GUARD)
        assert viewers[MAX_VIEWERS].close_code == 1013
    # Once they have gone, their slots are free again (the server notices each close in turn).
    for _ in range(200):
        with ExitStack() as stack:
            again = viewer(stack)
            try:
                assert "snapshot" in json.loads(again.recv(timeout=HANG_GUARD))
                return
            except ConnectionClosed:
                assert again.close_code == 1013
    raise AssertionError("the viewers' slots were never freed")
