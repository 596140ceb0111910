"""Every code block in README.md and docs/*.md runs, and shows what it says it shows.

What a block is decides how it runs:

- ```python then ```text: a fresh interpreter in a temporary folder; stdout must equal the text.
- ```python alone: the same; exit status 0.
- ```sh: ``sh -c`` in a temporary folder with the venv's bin first on PATH; exit status 0. A
  single ``oam-actors serve …`` or ``oam-actors device …`` line is a server: it starts with every
  port 0, must print its addresses, and serves the later blocks of its page that name its example
  addresses (rewritten to the real ones); after the last of them, SIGINT must stop it cleanly
  (exit status 0, or 130 as for Ctrl-C).
- ```text whose lines all begin ``> `` or ``< ``: a JSON-RPC exchange, replayed against a real
  ``oam-actors stdio`` subprocess with the flags of the HTML comment before it,
  ``<!-- stdio: FLAGS -->``: each ``>`` line is sent, then as many messages as ``<`` lines follow
  are read and compared; ``…`` in a ``<`` line stands for any text (ids, durations, token counts).
- ```yaml, ```toml, ```json: a configuration or a message shown whole; it must parse.
- Any other block (a ```text output, a tree, a diagram) is not code.

A few commands cannot run here as written; SUBSTITUTIONS and ELSEWHERE list each with the reason.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
TIMEOUT = 60.0  # seconds; a hang guard only, never a timing assertion

# The docs' command → what this test runs instead, and why.
SUBSTITUTIONS = {
    # `pip install -e .` would repoint the shared venv at the temporary folder; the venv has the
    # package already. The minute of load becomes two seconds.
    "python3 -m pip install -e . && oam-actors simulate":
        "oam-actors simulate --duration 2 --no-progress",
    # The whole suite cannot run inside itself; tests/test_ci.py checks .ci/run runs this command.
    "python3 -m pip install -e '.[test]' && python3 -m pytest -q":
        f"python3 -m pytest -q -p no:cacheprovider {REPO}/tests/test_ci.py",
    # The guide's crowd, for two seconds instead of a minute.
    "oam-actors simulate --phones 8 --npcs 100 --sessions 0 --no-progress":
        "oam-actors simulate --phones 8 --npcs 100 --sessions 0 --no-progress --duration 2",
}
# Blocks another test runs in full; the value names it.
ELSEWHERE = {
    "cluster/start.sh local 2 6379 && oam-actors stdio --runtime ray --address 127.0.0.1:6379\n"
    "cluster/start.sh stop 6379": "tests/test_cluster_start.py",
}
# Extra flags for a server the docs start, so that it answers within a test's time.
SERVER_FLAGS = {"farm:": ["--farm-time-scale", "0.01"]}

# Data blocks and how each is checked: it parses.
DATA = {"yaml": lambda text: yaml.safe_load(text), "toml": lambda text: tomllib.loads(text),
        "json": lambda text: json.loads(text)}

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.S | re.M)
_DIRECTIVE = re.compile(r"<!--\s*stdio:(.*?)-->\s*\Z", re.S)
_ADDRESS = re.compile(r"(\[::1\]|[\w.-]+):(\d+)")


@dataclass
class Block:
    page: Path
    index: int
    kind: str  # python, python-output, sh, exchange, server, or a data format (yaml, toml, json)
    code: str
    expected: str = ""
    flags: str | None = None
    line: int = 0

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    fences = list(_FENCE.finditer(text))
    found: list[Block] = []
    skip = False
    for i, fence in enumerate(fences):
        if skip:
            skip = False
            continue
        language, body = fence.group(1), fence.group(2)
        line = text.count("\n", 0, fence.start()) + 1
        following = fences[i + 1] if i + 1 < len(fences) else None
        if language == "python":
            if following and following.group(1) == "text" and not text[fence.end():following.start()].strip():
                found.append(Block(page, len(found), "python-output", body, following.group(2), line=line))
                skip = True
            else:
                found.append(Block(page, len(found), "python", body, line=line))
        elif language in ("sh", "console"):
            lines = [ln for ln in body.splitlines() if ln.strip()]
            if language == "console":
                lines = [ln[2:] for ln in lines if ln.startswith("$ ")]
            code = "\n".join(lines)
            is_server = len(lines) == 1 and re.match(r"oam-actors (serve|device)\b", lines[0]) is not None
            found.append(Block(page, len(found), "server" if is_server else "sh", code, line=line))
        elif language in DATA:
            found.append(Block(page, len(found), language, body, line=line))
        elif language == "text" and body.strip() and all(
                ln.startswith(("> ", "< ")) for ln in body.splitlines() if ln.strip()):
            directive = _DIRECTIVE.search(text[fences[i - 1].end() if i else 0:fence.start()])
            found.append(Block(page, len(found), "exchange", body,
                               flags=None if directive is None else directive.group(1).strip(), line=line))
    return found


BLOCKS = [block for page in PAGES for block in _blocks(page)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)  # this worktree's code, in every process a block starts
    return env


class Server:
    """A server block's command, with every port 0; ``addresses`` maps the example HOST:PORT of
    each listener to the one it bound."""

    def __init__(self, command: str) -> None:
        args = shlex.split(command)[1:]  # after `oam-actors`
        examples: list[str] = []
        run: list[str] = []
        for i, arg in enumerate(args):
            previous = args[i - 1] if i else ""
            if previous in ("--tcp", "--ws", "--openai", "--console") and (match := _ADDRESS.fullmatch(arg)):
                examples.append(arg)
                arg = f"{match.group(1)}:0"
            elif previous == "--port":
                examples.append(f"127.0.0.1:{arg}")
                arg = "0"
            run.append(arg)
        for marker, extra in SERVER_FLAGS.items():
            if marker in command:
                run += extra
        self.proc = subprocess.Popen([sys.executable, "-m", "oam_actors", *run], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        lines = _read_lines(self.proc, len(examples))
        self.addresses = {example: urlsplit(bound).netloc for example, bound in zip(examples, lines, strict=True)}

    def stop(self) -> int:
        """SIGINT, as Ctrl-C; the exit status (-9 if it had to be killed)."""
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _read_lines(proc: subprocess.Popen[bytes], count: int) -> list[str]:
    """``count`` lines of stdout, or a failure carrying stderr if the process ends or hangs."""
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for _ in range(count):
            found.put(proc.stdout.readline().decode().strip())

    threading.Thread(target=read, daemon=True).start()
    lines = []
    for _ in range(count):
        try:
            line = found.get(timeout=TIMEOUT)
        except queue.Empty:
            proc.kill()
            pytest.fail(f"no address line; stderr: {proc.communicate()[1].decode()[-2000:]}")
        if not line:
            pytest.fail(f"the server ended; stderr: {proc.communicate()[1].decode()[-2000:]}")
        lines.append(line)
    return lines


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Server]]:
    running: dict[str, Server] = {}
    yield running
    for server in running.values():  # left by a failed or deselected test
        server.stop()


def _server(block: Block, servers: dict[str, Server]) -> Server:
    if block.name not in servers:
        servers[block.name] = Server(block.code)
    return servers[block.name]


def _examples(server: Block) -> list[str]:
    """The example addresses a server block listens on, as HOST:PORT."""
    return [m.group(0) for m in _ADDRESS.finditer(server.code)] + [
        f"127.0.0.1:{port}" for port in re.findall(r"--port (\d+)", server.code)]


def _names(block: Block, server: Block) -> bool:
    """Whether ``block`` is a later block of the server's page naming one of its addresses."""
    return block.page == server.page and block.index > server.index and any(
        shown in block.code for example in _examples(server) for shown in _spellings(example))


def _with_servers(block: Block, code: str, servers: dict[str, Server]) -> str:
    """``code`` with the example addresses of the page's earlier servers made real (each server
    starts when a block first names it)."""
    for server in BLOCKS:
        if server.kind == "server" and _names(block, server):
            for example, real in _server(server, servers).addresses.items():
                for shown, bound in zip(_spellings(example), _spellings(real), strict=True):
                    code = code.replace(shown, bound)
    return code


def _stop_servers_done_with(block: Block, servers: dict[str, Server]) -> dict[str, int]:
    """Stop the servers no block after ``block`` names (a Ray server holds its cores meanwhile);
    their exit statuses by name."""
    stopped = {}
    for server in BLOCKS:
        if server.name in servers and server.page == block.page and server.index <= block.index and not any(
                _names(later, server) for later in BLOCKS if later.index > block.index):
            stopped[server.name] = servers.pop(server.name).stop()
    return stopped


def _spellings(address: str) -> tuple[str, str]:
    """``HOST:PORT`` as a URL and as a Python ``("HOST", PORT)`` pair spell it."""
    host, port = address.rsplit(":", 1)
    return address, f'"{host}", {port}'


def _run(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=tmp_path, env=_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)


def _replay(block: Block) -> None:
    assert block.flags is not None, f"{block.name}: say which flags the exchange needs: <!-- stdio: FLAGS -->"
    proc = subprocess.Popen([sys.executable, "-m", "oam_actors", "stdio", *shlex.split(block.flags)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert proc.stdin is not None and proc.stdout is not None
    received: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            received.put(raw.decode().rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    try:
        for line in (ln for ln in block.code.splitlines() if ln.strip()):
            if line.startswith("> "):
                proc.stdin.write(line[2:].encode() + b"\n")
                proc.stdin.flush()
                continue
            try:
                got = received.get(timeout=TIMEOUT)
            except queue.Empty:
                pytest.fail(f"{block.name}: no message where the block shows {line[2:]}")
            pattern = ".*?".join(re.escape(part) for part in line[2:].split("…"))
            assert re.fullmatch(pattern, got), f"{block.name}: expected\n{line[2:]}\ngot\n{got}"
        proc.stdin.close()
        assert proc.wait(timeout=TIMEOUT) == 0, proc.stderr.read().decode()  # type: ignore[union-attr]
        assert received.empty(), f"{block.name}: messages the block does not show: {received.get()}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_there_are_blocks_of_every_kind() -> None:
    kinds = {block.kind for block in BLOCKS}
    assert kinds >= {"python", "python-output", "sh", "exchange", "server"}, kinds


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(REPO)) for page in PAGES])
def test_every_block_is_of_a_kind_this_test_knows(page: Path) -> None:
    """A block in another language (```bash, ```ini) would not run: name it sh, python, text or a data format."""
    languages = {fence.group(1) for fence in _FENCE.finditer(page.read_text(encoding="utf-8"))}
    assert languages <= {"python", "sh", "console", "text", *DATA}, f"{page.name}: blocks in {languages}"


def test_substitutions_and_elsewhere_name_real_blocks() -> None:
    codes = {block.code for block in BLOCKS}
    assert sorted(set(SUBSTITUTIONS) - codes) == [], "a substitution for a block no page holds"
    assert sorted(set(ELSEWHERE) - codes) == [], "an exception for a block no page holds"
    for test in ELSEWHERE.values():
        assert (REPO / test).is_file()


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_block_runs(block: Block, servers: dict[str, Server], tmp_path: Path) -> None:
    try:
        _run_block(block, servers, tmp_path)
    except BaseException:
        _stop_servers_done_with(block, servers)
        raise
    stopped = _stop_servers_done_with(block, servers)
    # serve exits 0 on SIGINT, device 130 (interrupted, as a shell reports Ctrl-C): both are clean.
    assert all(status in (0, 130) for status in stopped.values()), f"a server did not stop cleanly on SIGINT: {stopped}"


def _run_block(block: Block, servers: dict[str, Server], tmp_path: Path) -> None:
    if block.code in ELSEWHERE:
        return  # run in full by the test ELSEWHERE names (checked above to exist)
    if block.kind == "server":
        assert _server(block, servers).proc.poll() is None
        return
    if block.kind == "exchange":
        _replay(block)
        return
    if block.kind in DATA:
        DATA[block.kind](block.code)
        return
    code = _with_servers(block, SUBSTITUTIONS.get(block.code, block.code), servers)
    if block.kind == "sh":
        done = _run(["sh", "-c", code], tmp_path)
        assert done.returncode == 0, f"{block.name}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return
    done = _run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 0, f"{block.name}:\n{done.stderr[-4000:]}"
    if block.kind == "python-output":
        assert done.stdout == block.expected, f"{block.name}: stdout differs from the block after it"
