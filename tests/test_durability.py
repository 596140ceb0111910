"""Durable objects: the state store (SQLite), group commit before answer, and ``--state-store``
on real ``oam-actors stdio`` processes, killed with SIGKILL and restarted on the same file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from bridge_process import BridgeProcess, scripted
from serve_process import ServeProcess
from oam_actors.bridge import Bridge
from oam_actors.errors import ErrorCode
from oam_actors.runtime import (
    Actor,
    Address,
    CheckpointFailed,
    Durability,
    LocalSystem,
    SqliteStore,
    StaleVersion,
    StoreCorrupt,
    StoreLocked,
    StoreMissing,
    StoreRecord,
    StoreTooNew,
    StoreTooOld,
    open_store,
)

GORM = {"name": "Gorm", "role": "smith", "personality": "gruff", "speakingStyle": "short"}
LINE = {"json": {"emotion": "neutral", "line": "Hello.", "player_options": ["Bye."], "ends_conversation": False}}


def record(key: str, version: int, state: bytes = b"s", recipe: bytes | None = b"r") -> StoreRecord:
    kind, _, object_id = key.partition(":")
    return StoreRecord(key, "", kind, object_id, version, recipe, state)


# --- the store -------------------------------------------------------------------------------


def test_a_store_keeps_records_and_a_commit_keeps_the_recipe(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store = open_store(path)
    assert store.write([record("session:a", 1, b"one"), record("npc:b", 1)]) == []
    assert store.write([record("session:a", 2, b"two", recipe=None)]) == []
    store.close()
    store = open_store(path)
    a = store.load("session:a")
    assert a is not None and (a.version, a.state, a.recipe) == (2, b"two", b"r")
    assert [r.key for r in store.records()] == ["npc:b", "session:a"]
    store.close()


def test_a_stale_writer_cannot_overwrite_a_newer_version(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s.db"))
    store.write([record("session:a", 5, b"new")])
    assert store.write([record("session:a", 4, b"old"), record("session:b", 1)]) == ["session:a"]
    a = store.load("session:a")
    assert a is not None and (a.version, a.state) == (5, b"new")
    assert store.load("session:b") is not None
    store.close()


def test_a_second_process_is_refused_while_the_store_is_held(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store = open_store(path)
    code = f"from oam_actors.runtime import open_store\ntry:\n open_store({path!r})\nexcept Exception as e: print(type(e).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "StoreLocked"
    store.close()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_bad_stores_are_refused_and_left_as_they_were(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing, match="does not exist"):
        open_store(str(tmp_path / "nowhere" / "s.db"))
    assert not (tmp_path / "nowhere").exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all, just text" * 10)
    with pytest.raises(StoreCorrupt, match="not an oam-actors state store"):
        open_store(str(junk))
    assert junk.read_bytes().startswith(b"this is not")
    with pytest.raises(StoreMissing, match="no such state store"):
        open_store(str(tmp_path / "absent.db"), create=False)
    assert not (tmp_path / "absent.db").exists()


def test_newer_and_older_schemas_are_refused_saying_how(tmp_path: Path) -> None:
    newer = str(tmp_path / "newer.db")
    open_store(newer).close()
    _set_schema_version(newer, 99)
    files = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    with pytest.raises(StoreTooNew, match="upgrade oam-actors"):
        open_store(newer)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == files  # nothing written
    older = str(tmp_path / "older.db")
    db = sqlite3.connect(older)
    db.execute("CREATE TABLE checkpoints (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
    db.commit()
    db.close()
    with pytest.raises(StoreTooOld, match="move it away"):
        open_store(older)


def _set_schema_version(path: str, version: int) -> None:
    """Make the store at ``path`` look written by another oam-actors."""
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    db.commit()
    db.close()


# --- group commit before answer ----------------------------------------------------------------


class Counter(Actor):
    def __init__(self) -> None:
        self.count = 0

    async def handle(self, message: Any) -> Any:
        self.commit()
        self.count += 1
        return self.count

    def snapshot(self) -> bytes:
        return msgspec.json.encode(self.count)


class FailingStore(SqliteStore):
    """A store whose writes fail from ``fail`` on (a full disk)."""

    fail = False

    def write(self, records: Any, deletions: Any = ()) -> list[str]:
        if self.fail:
            raise sqlite3.OperationalError("database or disk is full")
        return super().write(records, deletions)


async def _made(system: LocalSystem, address: Address) -> Any:
    actor = Counter()
    ref = system.spawn(address, lambda: actor)
    assert system.durability is not None
    await system.durability.create(address, tenant="t", kind=address.kind, object_id=address.id, recipe=b"{}",
                                   state=actor.snapshot())
    return ref


async def test_every_answered_commit_is_in_the_store_and_concurrent_ones_share_transactions(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s.db"))
    durability = Durability(store)
    async with LocalSystem(durability=durability) as system:
        refs = [await _made(system, Address("counter", f"c{i}")) for i in range(50)]
        for ref in refs:
            reply = ref.ask_nowait("tick")
            reply.add_done_callback(lambda value, error, key=str(ref.address): _check_stored(store, key, value))
        await anyio.sleep(0)
        for ref in refs:
            assert await ref.ask("tick") == 2
    assert durability.commits == 150
    assert durability.batches < 150  # group commit: concurrent commits shared transactions
    stored = store.records(kind="counter")
    assert {r.state for r in stored} == {b"2"} and {r.version for r in stored} == {3}
    store.close()


def _check_stored(store: SqliteStore, key: str, value: int) -> None:
    stored = store.load(key)
    assert stored is not None and msgspec.json.decode(stored.state) >= value


async def test_a_failed_write_fails_the_request_and_the_object_keeps_its_last_durable_state(tmp_path: Path) -> None:
    store = FailingStore(str(tmp_path / "s.db"))
    async with LocalSystem(durability=Durability(store)) as system:
        address = Address("counter", "c")
        ref = await _made(system, address)
        assert await ref.ask("tick") == 1
        store.fail = True
        with pytest.raises(CheckpointFailed) as failed:
            await ref.ask("tick")
        assert "disk is full" in str(failed.value.__cause__)
        assert Bridge.error_for(failed.value).code is ErrorCode.INTERNAL_ERROR
        await anyio.sleep(0.01)
        assert system.lookup(address) is None  # evicted: its memory was ahead of the store
        store.fail = False
        stored = store.load(str(address))
        assert stored is not None and stored.state == b"1"
        assert await _made(system, Address("counter", "other")) is not None  # still serving
    store.close()


def test_stale_version_is_an_internal_error() -> None:
    assert Bridge.error_for(StaleVersion(Address("npc", "x"))).code is ErrorCode.INTERNAL_ERROR


# --- stdio --state-store ----------------------------------------------------------------------


def test_a_tenants_objects_outlive_the_process_until_deleted(tmp_path: Path) -> None:
    db = str(tmp_path / "world.db")
    with BridgeProcess(["--state-store", db]) as p:
        p.call("session/create", {"session": "guard", "model": scripted([{"text": "Halt."}, {"text": "Pass."}])})
        p.call("session/respond", {"session": "guard", "prompt": "hello"})
        p.call("world/create", {"world": "village", "state": {"gold": 1}})
        p.call("world/set", {"world": "village", "path": "/gold", "value": 5})
        p.call("npc/create", {"npc": "gorm", "persona": GORM, "world": "village", "model": scripted([LINE, LINE])})
        assert p.call("npc/talk", {"npc": "gorm", "line": "hi"})["line"] == "Hello."
        assert p.close() == 0
    with BridgeProcess(["--state-store", db]) as p:
        entries = p.call("session/transcript", {"session": "guard"})["transcript"]["transcript"]["entries"]
        assert [e["text"] for e in entries] == ["hello", "Halt."]
        assert p.call("session/respond", {"session": "guard", "prompt": "again"})["text"] == "Pass."
        assert p.call("world/get", {"world": "village", "path": "/gold"})["value"] == 5
        [npc] = p.call("npc/list")["npcs"]
        assert (npc["npc"], npc["turnCount"], npc["world"]) == ("gorm", 1, "village")
        assert p.call("npc/delete", {"npc": "gorm"})["deleted"] is True
        assert p.call("session/delete", {"session": "guard"})["deleted"] is True
        assert p.close() == 0
    with BridgeProcess(["--state-store", db]) as p:
        assert p.call("npc/list")["npcs"] == [] and p.call("session/list")["sessions"] == []
        assert [w["world"] for w in p.call("world/list")["worlds"]] == ["village"]
        assert p.close() == 0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OAM_")}
    return subprocess.run([sys.executable, "-m", "oam_actors", *args], input="", capture_output=True, text=True,
                          env=env, timeout=60)


def test_bad_stores_exit_2_with_one_line_and_nothing_written(tmp_path: Path) -> None:
    missing = _cli("stdio", "--state-store", str(tmp_path / "no" / "s.db"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and len(missing.stderr.splitlines()) == 1
    assert not (tmp_path / "no").exists()
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    corrupt = _cli("stdio", "--state-store", str(junk))
    assert corrupt.returncode == 2 and "not an oam-actors state store" in corrupt.stderr
    assert len(corrupt.stderr.splitlines()) == 1 and junk.read_text() == "not a database"
    newer = str(tmp_path / "newer.db")
    open_store(newer).close()
    _set_schema_version(newer, 2)
    refused = _cli("stdio", "--state-store", newer)
    assert refused.returncode == 2 and "upgrade oam-actors" in refused.stderr and len(refused.stderr.splitlines()) == 1
    db = str(tmp_path / "s.db")
    with BridgeProcess(["--state-store", db]) as holder:
        holder.call("ping")
        locked = _cli("stdio", "--state-store", db)
        assert locked.returncode == 2 and "in use by another process" in locked.stderr
        assert len(locked.stderr.splitlines()) == 1
        assert holder.close() == 0


def test_sigkill_mid_load_loses_no_acknowledged_turn_and_tears_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "crash.db")
    acknowledged = 0
    for round_number, kill_after in enumerate((3, 7, 12)):
        with BridgeProcess(["--state-store", db]) as p:
            if round_number == 0:
                p.call("session/create", {"session": "s", "model": scripted([{"text": f"r{i}"} for i in range(80)])})
                p.call("world/create", {"world": "w", "state": {"n": 0}})
            ids = []
            for i in range(20):  # a burst in flight; the kill comes after some are answered
                ids.append(p.request("session/respond", {"session": "s", "prompt": f"p{round_number}-{i}"}))
                ids.append(p.request("world/set", {"world": "w", "path": "/n", "value": round_number * 100 + i}))
            answered = p.wait_for(lambda m: m.get("id") == ids[kill_after * 2])
            assert answered >= 0
            p.proc.send_signal(signal.SIGKILL)
            p.proc.wait()
            turns = [m for m in p.log if m.get("id") in ids[::2] and "result" in m]
            acknowledged += len(turns)
            last_set = max((m["result"]["version"] for m in p.log if m.get("id") in ids[1::2] and "result" in m))
        with BridgeProcess(["--state-store", db]) as check:
            entries = check.call("session/transcript", {"session": "s"})["transcript"]["transcript"]["entries"]
            kinds = [e["type"] for e in entries]
            assert kinds == ["prompt", "response"] * (len(entries) // 2)  # never half a turn
            assert len(entries) // 2 >= acknowledged  # every answered turn is there
            acknowledged = len(entries) // 2  # unanswered but durable ones count from now on
            assert check.call("world/list")["worlds"][0]["version"] >= last_set
            assert check.close() == 0


# --- oam-actors state ---------------------------------------------------------------------------


def _filled_store(db: str) -> None:
    with BridgeProcess(["--state-store", db]) as p:
        p.call("session/create", {"session": "guard", "instructions": "Be brief.", "model": scripted([{"text": "Halt."}])})
        p.call("session/respond", {"session": "guard", "prompt": "hello"})
        p.call("world/create", {"world": "village", "state": {"gold": 7}})
        p.call("npc/create", {"npc": "gorm", "persona": GORM, "world": "village", "model": scripted([LINE])})
        p.call("npc/talk", {"npc": "gorm", "line": "hi"})
        assert p.close() == 0


def test_state_lists_exports_imports_and_compacts(tmp_path: Path) -> None:
    db, copy = str(tmp_path / "s.db"), str(tmp_path / "copy.db")
    _filled_store(db)
    listed = _cli("state", db)
    assert listed.returncode == 0
    assert [line.rsplit(" version ", 1)[0] for line in listed.stdout.splitlines()] == [
        "- npc gorm", "- session guard", "- world village"]
    exported = _cli("state", db, "export")
    lines = [msgspec.json.decode(line) for line in exported.stdout.splitlines()]
    npc, session, world = lines
    assert npc["state"]["persona"]["name"] == "Gorm" and npc["state"]["world"] == "village"
    assert [e["text"] for e in session["transcript"]["transcript"]["entries"]] == ["hello", "Halt."]
    assert (world["value"], world["exists"]) == ({"gold": 7}, True)
    (tmp_path / "export.jsonl").write_text(exported.stdout)
    imported = _cli("state", copy, "import", str(tmp_path / "export.jsonl"))
    assert imported.returncode == 0 and "imported 3 objects" in imported.stdout
    assert _cli("state", copy, "export").stdout == exported.stdout
    with BridgeProcess(["--state-store", copy]) as p:
        assert p.call("world/get", {"world": "village", "path": "/gold"})["value"] == 7
        assert p.call("npc/list")["npcs"][0]["turnCount"] == 1
        assert p.call("session/transcript", {"session": "guard"})["transcript"]["transcript"]["instructions"] == "Be brief."
        assert p.close() == 0
    compacted = _cli("state", db, "compact")
    assert compacted.returncode == 0 and compacted.stdout.startswith("compacted:")


def test_state_refuses_missing_locked_corrupt_stores_and_bad_lines(tmp_path: Path) -> None:
    missing = _cli("state", str(tmp_path / "absent.db"))
    assert missing.returncode == 2 and "no such state store" in missing.stderr and len(missing.stderr.splitlines()) == 1
    assert not (tmp_path / "absent.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_text("junk")
    corrupt = _cli("state", str(junk), "export")
    assert corrupt.returncode == 2 and "not an oam-actors state store" in corrupt.stderr
    db = str(tmp_path / "s.db")
    with BridgeProcess(["--state-store", db]) as holder:
        holder.call("ping")
        locked = _cli("state", db)
        assert locked.returncode == 2 and "in use by another process" in locked.stderr
        assert holder.close() == 0
    (tmp_path / "bad.jsonl").write_text('{"tenant": "", "kind": "world", "world": "w", "value": {}}\n{"kind": 3}\n')
    bad = _cli("state", db, "import", str(tmp_path / "bad.jsonl"))
    assert bad.returncode == 2 and "line 2" in bad.stderr and len(bad.stderr.splitlines()) == 1
    assert _cli("state", db).stdout == ""  # all or nothing


def test_a_world_written_by_an_npc_tool_is_checkpointed_with_the_npcs_turn(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    steps = [{"toolCalls": [{"name": "update_world_state", "arguments": {"path": "quests.ring", "value": "started"}}]},
             LINE]
    with BridgeProcess(["--state-store", db]) as p:
        p.call("world/create", {"world": "village", "state": {"quests": {}}})
        p.call("npc/create", {"npc": "gorm", "persona": GORM, "world": "village", "model": scripted(steps),
                              "options": {"worldWritable": ["quests"], "maxToolRounds": 2}})
        assert p.call("npc/talk", {"npc": "gorm", "line": "Any work?"})["line"] == "Hello."
        p.proc.send_signal(signal.SIGKILL)  # no orderly exit: only what each answer waited for
        p.proc.wait()
    with BridgeProcess(["--state-store", db]) as p:
        got = p.call("world/get", {"world": "village", "path": "quests.ring"})
        assert (got["value"], got["version"]) == ("started", 1)
        assert p.close() == 0


def test_stored_sessions_count_against_the_limit_after_a_restart(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with BridgeProcess(["--state-store", db, "--max-sessions", "2"]) as p:
        p.call("session/create", {"session": "a", "model": "scripted"})
        p.call("session/create", {"session": "b", "model": "scripted"})
        assert p.close() == 0
    with BridgeProcess(["--state-store", db, "--max-sessions", "2"]) as p:
        assert p.error(p.request("session/create", {"session": "c", "model": "scripted"}))["code"] == -32022
        assert [s["session"] for s in p.call("session/list")["sessions"]] == ["a", "b"]
        assert p.close() == 0


# --- serve --state-store ----------------------------------------------------------------------


def test_serve_keeps_each_tenants_objects_apart_across_connections_and_a_sigkill(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    args = ["--tcp", "127.0.0.1:0", "--token", "alice=secret-a", "--token", "bob=secret-b", "--state-store", db]
    with ServeProcess(args) as server:
        with server.tcp("secret-a") as alice:
            alice.call("session/create", {"session": "guard", "model": scripted([{"text": f"r{i}"} for i in range(30)])})
            alice.call("world/create", {"world": "village", "state": {"n": 0}})
            ids = [alice.request("session/respond", {"session": "guard", "prompt": f"p{i}"}) for i in range(20)]
            alice.wait_for(lambda m: m.get("id") == ids[5])
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait()
            answered = sum(1 for m in alice.log if m.get("id") in ids and "result" in m)
    with ServeProcess(args) as server:
        with server.tcp("secret-b") as bob:
            assert bob.call("session/list")["sessions"] == [] and bob.call("world/list")["worlds"] == []
        with server.tcp("secret-a") as alice, server.tcp("secret-a") as again:
            entries = alice.call("session/transcript", {"session": "guard"})["transcript"]["transcript"]["entries"]
            assert len(entries) // 2 >= answered and len(entries) % 2 == 0
            alice.call("world/set", {"world": "village", "path": "n", "value": 9})
            assert again.call("world/get", {"world": "village", "path": "n"})["value"] == 9  # one tenant, shared
        assert server.stop() == 0
    listed = _cli("state", db).stdout.splitlines()
    assert [line.rsplit(" version ", 1)[0] for line in listed] == ["alice session guard", "alice world village"]


async def test_a_request_whose_commit_cannot_be_written_gets_internal_error_and_the_server_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FailingStore(str(tmp_path / "s.db"))
    out: list[dict[str, Any]] = []

    async def write(data: bytes) -> None:
        out.extend(msgspec.json.decode(line) for line in data.splitlines())

    def answer(request_id: int) -> dict[str, Any]:
        [message] = [m for m in out if m.get("id") == request_id]
        return message

    def line(request_id: int, method: str, params: dict[str, Any]) -> bytes:
        return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})

    model = scripted([{"text": "one"}, {"text": "two"}, {"text": "three"}])
    async with LocalSystem(durability=Durability(store)) as system:
        async with Bridge(system, write) as bridge:
            await bridge.receive(line(1, "session/create", {"session": "s", "model": model}))
            await bridge.receive(line(2, "session/respond", {"session": "s", "prompt": "a"}))
            with anyio.fail_after(10):
                while len(out) < 2:
                    await anyio.sleep(0.01)
            store.fail = True
            await bridge.receive(line(3, "session/respond", {"session": "s", "prompt": "b"}))
            with anyio.fail_after(10):
                while len(out) < 3:
                    await anyio.sleep(0.01)
            error = answer(3)["error"]
            assert (error["code"], error["data"]["code"]) == (-32603, "internal_error")
            assert "could not be saved" in error["message"]
            assert "disk is full" in caplog.text
            store.fail = False
            await bridge.receive(line(4, "session/transcript", {"session": "s"}))
            await bridge.receive(line(5, "session/respond", {"session": "s", "prompt": "c"}))
            with anyio.fail_after(10):
                while len(out) < 5:
                    await anyio.sleep(0.01)
            # Back at its last durable state: the failed turn is not in it, the script goes on.
            entries = answer(4)["result"]["transcript"]["transcript"]["entries"]
            assert [e["text"] for e in entries] == ["a", "one"]
            assert answer(5)["result"]["text"] == "two"
    store.close()


def test_simulate_keeps_its_crowd_in_a_new_store_and_refuses_one_holding_objects(tmp_path: Path) -> None:
    db = str(tmp_path / "sim.db")
    args = ["simulate", "--backend", "scripted", "--sessions", "2", "--npcs", "3", "--duration", "1", "--think", "0.1",
            "--no-progress", "--report-dir", str(tmp_path / "report"), "--state-store", db]
    assert _cli(*args).returncode == 0
    kinds = [line.split()[1] for line in _cli("state", db).stdout.splitlines()]
    assert (kinds.count("session"), kinds.count("npc"), kinds.count("world")) == (2, 3, 1)
    again = _cli(*args)
    assert again.returncode == 2 and "holds 6 objects" in again.stderr and len(again.stderr.splitlines()) == 1



def test_creations_waiting_for_the_store_are_answered_in_arrival_order_with_immediate_methods(tmp_path: Path) -> None:
    with BridgeProcess(["--state-store", str(tmp_path / "s.db")]) as p:
        ids = []
        for i in range(30):  # pipelined: the creations' writes share transactions
            ids.append(p.request("world/create", {"world": f"w{i}"}))
            ids.append(p.request("ping"))
            ids.append(p.request("npc/create", {"npc": f"n{i}", "persona": GORM, "model": "scripted"}))
            ids.append(p.request("world/list" if i % 10 else "nope/unknown"))
        p.wait_for(lambda m: m.get("id") == ids[-1])
        answered = [m["id"] for m in p.log if m.get("id") in ids]
        assert answered == ids
        assert len(p.call("world/list")["worlds"]) == 30
        assert p.close() == 0
