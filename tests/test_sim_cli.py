"""`oam-actors simulate` as a real subprocess: option errors, Ctrl-C, and the progress it shows."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import queue
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

SIMULATE = [sys.executable, "-m", "oam_actors", "simulate"]
# A short, cheap run: scripted models, a few sessions, no NPCs.
SCRIPTED = ["--backend", "scripted", "--sessions", "4", "--think", "0.1", "--cancel-rate", "0.2"]


def _simulate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SIMULATE, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("args", "says"), [
    (["--phones", "0"], "argument --phones: expected an integer of at least 1, got '0'"),
    (["--phones", "two"], "argument --phones: expected an integer of at least 1, got 'two'"),
    (["--backend", "proxy"], "--backend proxy needs --proxy URL[#MODEL]"),
    (["--backend", "proxy", "--proxy", "ftp://127.0.0.1:1"], "--proxy:"),
    (["--backend", "devices"], "--backend devices needs at least one --device URL"),
    (["--backend", "devices", "--device", "127.0.0.1:8700"], "--device: device URL '127.0.0.1:8700'"),
    (["--device", "http://127.0.0.1:8700"], "--device needs --backend devices"),
    (["--proxy", "http://127.0.0.1:1"], "--proxy needs --backend proxy"),
    (["--duration", "-1"], "argument --duration: expected a number greater than 0, got '-1'"),
    (["--duration", "nan"], "argument --duration: expected a number greater than 0, got 'nan'"),
    (["--sessions", "0", "--npcs", "0"], "nothing to run: --sessions and --npcs are both 0"),
    (["--backend", "scripted", "--sessions", "0"], "nothing to run"),  # scripted: no NPCs by default
    (["--sessions", "-3"], "argument --sessions: expected an integer of at least 0, got '-3'"),
    (["--cancel-rate", "1.5"], "argument --cancel-rate: expected a number from 0 to 1, got '1.5'"),
    (["--tool-timeout-rate", "-0.1"], "argument --tool-timeout-rate: expected a number from 0 to 1, got '-0.1'"),
    (["--think", "-1"], "argument --think: expected a number of at least 0, got '-1'"),
    (["--tool-timeout", "0"], "argument --tool-timeout: expected a number greater than 0, got '0'"),
    (["--time-scale", "0"], "argument --time-scale: expected a number greater than 0, got '0'"),
    (["--progress-interval", "0"], "argument --progress-interval: expected a number greater than 0, got '0'"),
])
def test_a_mistake_exits_2_with_one_line_naming_the_option(args: list[str], says: str, tmp_path: Path) -> None:
    completed = _simulate(*args, "--report-dir", str(tmp_path / "r"), "--no-progress", timeout=30)
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("oam-actors simulate: error: ")
    assert says in lines[0]
    assert not (tmp_path / "r" / "report.json").exists()


def test_a_report_dir_that_is_a_file_is_refused_before_the_run(tmp_path: Path) -> None:
    occupied = tmp_path / "occupied"
    occupied.write_text("")
    completed = _simulate(*SCRIPTED, "--report-dir", str(occupied), "--no-progress")
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        f"oam-actors simulate: error: --report-dir {occupied}: cannot create the directory (File exists)"]


def _progress(line: str) -> dict[str, int]:
    figures = {name: int(value) for name, value in re.findall(r"(turns ok|cancelled|failed|in flight) (\d+)", line)}
    assert set(figures) == {"turns ok", "cancelled", "failed", "in flight"}, line
    return figures


def test_without_a_terminal_progress_is_plain_lines_ending_on_the_final_numbers(tmp_path: Path) -> None:
    completed = _simulate(*SCRIPTED, "--duration", "2", "--progress-interval", "0.3", "--report-dir", str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert all(line.startswith("simulate: ") for line in lines), lines
    assert "turns failed" not in completed.stderr
    phases = [line.split(";")[0].removeprefix("simulate: ") for line in lines]
    assert phases[0] == "starting" and phases[-1] == "done" and "running" in phases
    assert len(lines) >= 5  # a 2 s run at one line per 0.3 s, plus the changes of phase
    oks = [_progress(line)["turns ok"] for line in lines]
    assert oks == sorted(oks)
    report = json.loads((tmp_path / "report.json").read_text())
    final = _progress(lines[-1])
    turns = report["turns"]
    assert (final["turns ok"], final["cancelled"], final["failed"], final["in flight"]) == (
        turns["ok"], turns["cancelled"], turns["failed"], 0)


def test_on_a_terminal_the_live_display_ends_on_the_final_numbers(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        [*SIMULATE, *SCRIPTED, "--duration", "2", "--report-dir", str(tmp_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower, env={**os.environ, "TERM": "xterm"},
    )
    os.close(follower)
    screen = b""
    while True:
        try:
            data = os.read(leader, 1 << 16)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        screen += data
    os.close(leader)
    assert process.wait(timeout=60) == 0
    text = screen.decode("utf-8", "replace")
    assert "Traceback" not in text and "turns failed" not in text
    rows = dict(re.findall(r"│ (phase|turns ok|cancelled|failed|in flight) +│ (\S+)", text.split("simulate —")[-1]))
    turns = json.loads((tmp_path / "report.json").read_text())["turns"]
    assert rows == {"phase": "done", "turns ok": str(turns["ok"]), "cancelled": str(turns["cancelled"]),
                    "failed": str(turns["failed"]), "in flight": "0"}


def test_ctrl_c_prints_one_line_and_writes_the_report_of_what_ran(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [*SIMULATE, *SCRIPTED, "--duration", "120", "--progress-interval", "0.2", "--report-dir", str(tmp_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen = []
    try:
        # Wait until turns have completed, so the report has something in it.
        while True:
            line = lines.get(timeout=60)
            assert line is not None, "".join(seen)
            seen.append(line)
            if line.startswith("simulate: running") and _progress(line)["turns ok"] > 0:
                break
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
        assert process.stdout is not None
        stdout = process.stdout.read()
    finally:
        process.kill()
    reader.join(timeout=10)
    while (line := lines.get_nowait()) is not None:
        seen.append(line)
    assert "Traceback" not in "".join(seen)
    interrupted = [line for line in seen if line.startswith("interrupted")]
    assert len(interrupted) == 1 and re.fullmatch(
        r"interrupted after \d+\.\d s; writing the report of what ran\n", interrupted[0])
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] is True
    assert report["turns"]["ok"] > 0
    assert report["turns"]["total"] == sum(report["turns"]["byOutcome"].values())
    assert report["loadSeconds"] < 120
    assert "Interrupted after" in (tmp_path / "report.html").read_text()
    assert "report.json" in stdout

