"""A real headless Chromium driven over the Chrome DevTools Protocol (CDP), with the
``websockets`` library the package already depends on: no browser-automation dependency.

``with Chromium.launch(tmp_path) as browser: page = browser.page(1366, 768)`` starts Debian's
``chromium`` (``--headless --remote-debugging-port=0``, its own profile in ``tmp_path``) and opens
a tab of that size; :meth:`Page.navigate`, :meth:`Page.evaluate` (a JavaScript expression, its
value returned as JSON), :meth:`Page.wait_for` (until an expression is truthy, with a hang guard,
never a timing assertion), :meth:`Page.screenshot` and :meth:`Page.cookies`.
:func:`chromium_path` is ``None`` where no browser is installed (tests skip with :data:`HOW_TO_GET`).
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Self

HANG_GUARD = 30.0  # seconds; only to fail a hung test instead of blocking the suite

HOW_TO_GET = ("needs a headless Chromium: on Debian/Ubuntu `apt-get install -y chromium` "
              "(.ci/run installs it where apt is available)")

_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
          "--disable-default-apps", "--remote-debugging-port=0")


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(AssertionError):
    """The browser answered a CDP command with an error, or a script threw."""


class Chromium:
    """One browser process (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.port = port

    @classmethod
    def launch(cls, profile: Path) -> Chromium:
        path = chromium_path()
        assert path is not None, HOW_TO_GET
        profile.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([path, *_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + HANG_GUARD
        while not port_file.exists() or not port_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"chromium did not start (exit status {proc.poll()})")
            time.sleep(0.05)
        return cls(proc, int(port_file.read_text().split()[0]))

    def page(self, width: int, height: int) -> Page:
        """A new tab, ``width`` × ``height`` CSS pixels."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(request, timeout=HANG_GUARD) as response:
            target = json.load(response)
        page = Page(target["webSocketDebuggerUrl"])
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        page.send("Page.enable")
        page.send("Network.enable")
        return page

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    """One tab, spoken to over its CDP WebSocket."""

    def __init__(self, url: str) -> None:
        from websockets.sync.client import connect

        connection = connect(url, max_size=None, proxy=None, open_timeout=HANG_GUARD)
        self._ws = connection.__enter__()  # entered as its context manager; the browser's end closes it
        self._ids = itertools.count(1)

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One CDP command; its result (events meanwhile are dropped)."""
        command_id = next(self._ids)
        self._ws.send(json.dumps({"id": command_id, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self._ws.recv(timeout=HANG_GUARD))
            if message.get("id") == command_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message["result"]

    def navigate(self, url: str) -> None:
        """Load ``url`` and wait until its document (after any redirect) has loaded."""
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression (promises awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str) -> Any:
        """The first truthy value of ``expression``, polled; fails after the hang guard."""
        deadline = time.monotonic() + HANG_GUARD
        while True:
            try:
                value = self.evaluate(expression)
            except BrowserError:
                value = None  # the page is between documents
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"never true in the page: {expression}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def cookies(self, url: str) -> list[dict[str, Any]]:
        return self.send("Network.getCookies", {"urls": [url]})["cookies"]

    def status_of(self, url: str) -> int:
        """The HTTP status of a ``fetch`` of ``url`` from the page (with its cookies)."""
        return self.evaluate(f"fetch({json.dumps(url)}, {{credentials: 'same-origin'}}).then(r => r.status)")
