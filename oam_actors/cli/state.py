"""``oam-actors state PATH [list|export|import FILE|compact]``: look after a state store.

- ``list`` (the default): one line per stored object, ``TENANT KIND ID version N``, by tenant,
  kind and id (the anonymous tenant shows as ``-``).
- ``export``: every object as one JSON line on stdout, in the shape its protocol method returns
  (``session/transcript``, ``npc/state``, ``world/get`` of the root, ``conversation/state``) plus ``tenant``, ``kind`` and
  what the object was created with (``model``, ``options``), so ``import`` can build it again.
- ``import FILE``: such lines (``-``: stdin) written into the store, each replacing the stored
  object of the same tenant, kind and id; all or nothing.
- ``compact``: fold the write-ahead log into the file and rebuild it without free pages.

The store is held while the command runs: a running server's store is refused (exit 2, one line),
as are a missing, corrupt or newer store and a malformed import line (nothing written).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from ..agent import Transcript
from ..bridge.bridge import tenant_namespace
from ..errors import ProtocolError
from ..game import NPCSaveState, WorldState
from ..game.conversation import ConversationState
from ..objects.conversation import ConversationCheckpoint
from ..objects.npc import NPCCheckpoint
from ..objects.session import SessionState
from ..runtime import Address, SqliteStore, StoreRecord, dumps_state, loads_state
from .argtypes import UsageError
from .runtime import opened_store

__all__ = ["add_arguments", "run"]

_KINDS = ("session", "npc", "world", "conversation")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="the state store (a file made by --state-store)")
    parser.add_argument("action", nargs="?", choices=("list", "export", "import", "compact"), default="list",
                        help="list (default), export as JSON lines, import JSON lines, compact the file")
    parser.add_argument("file", nargs="?", metavar="FILE", help="with import: the JSON lines file ('-': stdin)")


def run(args: argparse.Namespace) -> int:
    if (args.action == "import") != (args.file is not None):
        raise UsageError("import needs FILE, and only import takes one")
    lines = _read_lines(args.file) if args.action == "import" else []
    store = _open(args.path, create=args.action == "import")
    try:
        if args.action == "list":
            for record in store.records():
                print(f"{record.tenant or '-'} {record.kind} {record.id} version {record.version}")
        elif args.action == "export":
            for record in store.records():
                if record.kind in _KINDS:
                    sys.stdout.write(msgspec.json.encode(exported(record)).decode() + "\n")
        elif args.action == "import":
            records = [imported(line, number, store.load) for number, line in enumerate(lines, 1)]
            store.write(records)
            print(f"imported {len(records)} objects")
        else:
            before, after = store.compact()
            print(f"compacted: {before} -> {after} bytes")
    finally:
        store.close()
    return 0


def _open(path: str, *, create: bool) -> SqliteStore:
    try:
        return opened_store(path, create=create)
    except UsageError as exc:
        raise UsageError(str(exc).removeprefix("--state-store ")) from None


def _read_lines(name: str) -> list[bytes]:
    try:
        if name == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(name, "rb") as file:
                data = file.read()
    except OSError as exc:
        raise UsageError(f"{name}: {exc.strerror or exc}") from None
    return [line for line in data.splitlines() if line.strip()]


def exported(record: StoreRecord) -> dict[str, Any]:
    """``record`` in its protocol method's shape, with what ``imported`` needs besides."""
    recipe = msgspec.json.decode(record.recipe) if record.recipe else {}
    head = {"tenant": record.tenant, "kind": record.kind}
    if record.kind == "session":
        saved = msgspec.json.decode(record.state, type=SessionState)
        transcript = Transcript(instructions=saved.instructions, contextNote=saved.context_note, tools=saved.tools,
                                entries=list(saved.history))
        return {**head, "session": record.id, "transcript": transcript.to_wire(), "model": recipe.get("model"),
                "options": recipe.get("options")}
    if record.kind == "npc":
        checkpoint = msgspec.json.decode(record.state, type=NPCCheckpoint)
        state = checkpoint.state | {"npc": record.id, "options": checkpoint.options, "tools": checkpoint.tools,
                                    "world": recipe.get("world")}
        return {**head, "npc": record.id, "state": state, "model": recipe.get("model")}
    if record.kind == "conversation":
        saved = msgspec.json.decode(record.state, type=ConversationCheckpoint)
        return {**head, "conversation": record.id, "state": {"conversation": record.id, **saved.state.to_wire()},
                "createdAt": recipe.get("created_at", "")}
    document, _ = loads_state(record.state)
    return {**head, "world": record.id, "path": "", "value": document["document"], "exists": True,
            "version": document["version"]}


def imported(line: bytes, number: int, load: Any) -> StoreRecord:
    """The record an exported line stands for; :class:`UsageError` naming the line if malformed."""
    try:
        value = msgspec.json.decode(line)
        tenant, kind = value["tenant"], value["kind"]
        object_id = value[kind]
        if not isinstance(tenant, str) or kind not in _KINDS or not isinstance(object_id, str):
            raise ValueError("tenant, kind and id must be strings, kind one of session, npc, world, conversation")
        recipe, state = _encoded(kind, value, tenant)
    except (msgspec.DecodeError, KeyError, TypeError, ValueError, ProtocolError) as exc:
        raise UsageError(f"line {number}: not an exported object ({exc})") from None
    key = f"{kind}:{tenant_namespace(tenant)}{object_id}"
    stored = load(key)
    version = (stored.version if stored is not None else 0) + 1
    return StoreRecord(key, tenant, kind, object_id, version, msgspec.json.encode(recipe), state)


def _encoded(kind: str, value: dict[str, Any], tenant: str) -> tuple[dict[str, Any], bytes]:
    if kind == "session":
        transcript = Transcript.from_wire(value["transcript"], path="transcript")
        state = SessionState(transcript.instructions, transcript.contextNote, list(transcript.tools),
                             list(transcript.entries))
        return {"model": value.get("model"), "options": value.get("options")}, msgspec.json.encode(state)
    if kind == "npc":
        state = value["state"]
        NPCSaveState.from_wire(state, "state")  # checked here, not when first used
        checkpoint = NPCCheckpoint(state, state.get("options") or {}, state.get("tools") or [])
        return {"model": value.get("model"), "world": state.get("world"), "created_at": ""}, msgspec.json.encode(checkpoint)
    if kind == "conversation":
        conversation = ConversationState.from_wire(value["state"])
        namespace = tenant_namespace(tenant)  # its NPCs are the tenant's, as at its creation
        addresses = {npc: Address("npc", namespace + npc) for npc in (*conversation.ids, *conversation.audience)}
        created_at = value.get("createdAt")
        return ({"created_at": created_at if isinstance(created_at, str) else ""},
                msgspec.json.encode(ConversationCheckpoint(conversation, addresses)))
    document = WorldState(value["value"])
    return {"created_at": ""}, dumps_state(({"version": value.get("version", 0), "document": document.snapshot()}, []))
