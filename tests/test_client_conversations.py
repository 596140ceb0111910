"""The Python client's conversation helpers (``client.create_conversation`` and the
:class:`Conversation` handle) against a real ``oam-actors stdio`` child process with scripted NPCs.

Nothing asserts how long anything took; ``HANG_GUARD`` only fails a hung test.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from oam_actors import AgentError, ErrorCode, ProtocolError
from oam_actors.client import Client, Conversation, ConversationLine, ConversationReply, ConversationSaid, connect

HANG_GUARD = 30.0
STDIO = {"target": "stdio", "args": ["--model", "scripted"]}


def lines(*texts: str, delay_ms: int = 0) -> dict[str, Any]:
    return {"type": "scripted", "steps": [{"text": text, "delayMs": delay_ms} for text in texts]}


async def tavern(client: Client, **models: dict[str, Any]) -> None:
    """World ``tavern`` and one NPC per keyword (its id; its name is the id capitalised)."""
    await client.create_world("tavern")
    for npc, model in models.items():
        await client.create_npc(npc, persona={"name": npc.capitalize()}, world="tavern", model=model)


async def test_create_advance_streamed_run_and_say() -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(**STDIO) as client:
            await tavern(client, bran=lines("[worried] The bridge is out, Cora.", "[sad] Two days at least."),
                         cora=lines("[surprised] Then how will the miller come, Bran?"))
            table = await client.create_conversation("table", world="tavern", members=["bran", "cora"],
                                                     player="Finn", situation="A rainy evening.")
            first = await table.advance()
            turn = table.run_stream(4)
            events = [event async for event in turn]
            reply = await turn
            said = await table.say("I can row you across.", to="bran")
            listed = await client.list_conversations()
    assert isinstance(table, Conversation) and table.id == "table" and table.warnings == []
    assert first == ConversationReply(
        conversation="table", members=["bran", "cora"], next="cora", line_count=1,
        lines=[ConversationLine(speaker="bran", name="Bran", line="The bridge is out, Cora.", emotion="worried",
                                addressee="cora")])
    # the run stops at the player's turn: one line, streamed before the answer
    assert (reply.next, reply.player_turn, reply.ended, reply.line_count) == ("player", True, False, 2)
    [line] = reply.lines
    assert (line.speaker, line.line, line.emotion, line.addressee) == (
        "cora", "Then how will the miller come, Bran?", "surprised", "bran")
    types = [event["type"] for event in events]
    assert types[:2] == ["speaker", "emotion"] and types[-2:] == ["line", "playerTurn"]
    assert events[0] == {"type": "speaker", "npc": "cora", "name": "Cora"}
    assert "".join(event["delta"] for event in events if event["type"] == "lineDelta") == line.line
    assert events[-2]["line"] == line.line
    assert isinstance(said, ConversationSaid)
    assert (said.line.speaker, said.line.name, said.line.emotion, said.line.addressee) == (
        "player", "Finn", None, "bran")
    assert (said.next, said.player_turn, said.line_count) == ("bran", False, 3)
    assert [(item["conversation"], item["lineCount"], item["busy"]) for item in listed] == [("table", 3, False)]


async def test_join_leave_state_restore_and_delete() -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(**STDIO) as client:
            await tavern(client, bran=lines("[neutral] Evening, Cora."), cora=lines("[happy] Evening, Bran."),
                         dena=lines("[neutral] Quiet night."))
            table = await client.create_conversation(world="tavern", members=["bran", "cora"], line_budget=10)
            await table.run(2)
            joined = await table.join("dena")
            left = await table.leave("bran")
            state = await table.state()
            await table.delete()
            with pytest.raises(ProtocolError) as gone:
                await table.state()
            again = await client.restore_conversation(state, conversation="again")
            restored = await again.state()
            said_next = await again.advance()
    assert table.id == "conv1"  # generated
    assert (joined.members, joined.lines, joined.line_count) == (["bran", "cora", "dena"], [], 2)
    assert (left.members, left.ended) == (["cora", "dena"], False)
    assert [line["line"] for line in state["lines"]] == ["Evening, Cora.", "Evening, Bran."]
    assert gone.value.code is ErrorCode.CONVERSATION_NOT_FOUND
    assert restored["conversation"] == "again" and restored["lines"] == state["lines"]
    assert [member["npc"] for member in restored["members"]] == ["cora", "dena"]
    # the restored conversation goes on where the deleted one stood
    assert [line.speaker for line in said_next.lines] == [left.next] and said_next.line_count == 3


async def test_cancelling_the_awaiting_task_sends_conversation_cancel() -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(**STDIO) as client:
            await tavern(client, bran=lines("[neutral] Evening, Cora."),
                         cora=lines("[neutral] A long story...", delay_ms=600_000))
            table = await client.create_conversation("table", world="tavern", members=["bran", "cora"])
            seen: list[Any] = []
            with anyio.CancelScope() as scope:
                async for event in table.run_stream(2):
                    seen.append(event)
                    if event == {"type": "speaker", "npc": "cora", "name": "Cora"}:
                        scope.cancel()  # cora's step is stuck: the task iterating the run goes away
            # conversation/cancel ended the run on the server: nothing of it was committed
            while (listed := await client.list_conversations())[0]["busy"]:
                await anyio.sleep(0.05)
            state = await table.state()
            npc_state = await client.npc("bran").state()
    assert [event["type"] for event in seen if event["type"] == "line"] == ["line"]  # bran's line was said
    assert (listed[0]["lineCount"], state["lines"]) == (0, [])
    assert "heard" not in npc_state["memory"]  # and nobody remembers it


async def test_errors_are_raised_typed() -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(**STDIO) as client:
            await tavern(client, bran=lines("[neutral] Hm."), cora=lines("[neutral] Hm."))
            with pytest.raises(ProtocolError) as unknown_member:
                await client.create_conversation(world="tavern", members=["bran", "nobody"])
            table = await client.create_conversation("table", world="tavern", members=["bran", "cora"])
            with pytest.raises(ProtocolError) as exists:
                await client.create_conversation("table", world="tavern", members=["bran", "cora"])
            with pytest.raises(ProtocolError) as not_a_member:
                await table.advance(speaker="dena")
            with pytest.raises(ProtocolError) as no_player:
                await table.say("Hello?")
            with pytest.raises(ProtocolError) as unknown:
                await client.conversation("nowhere").run(2)
            duo = await client.create_conversation(world="tavern", members=["bran", "cora"], player="Finn")
            await client.npc("bran").delete()  # a conversation left with one member has ended
            with pytest.raises(AgentError) as ended:
                await duo.say("Hello?")
            after = await table.advance()
    assert unknown_member.value.code is ErrorCode.INVALID_PARAMS
    assert unknown_member.value.message == "Parameter 'members[1]': no NPC with id 'nobody'."
    assert exists.value.code is ErrorCode.CONVERSATION_EXISTS
    assert not_a_member.value.code is ErrorCode.INVALID_PARAMS and "speaker" in not_a_member.value.message
    assert no_player.value.code is ErrorCode.INVALID_PARAMS
    assert unknown.value.code is ErrorCode.CONVERSATION_NOT_FOUND and unknown.value.data()["conversation"] == "nowhere"
    assert ended.value.code is ErrorCode.INVALID_REQUEST and ended.value.code.number == -32011
    assert (after.ended, after.next, after.lines) == (True, None, [])


async def test_conversation_cancel_fails_the_running_advance_with_cancelled() -> None:
    outcome: list[BaseException] = []

    async def advance(table: Conversation) -> None:
        try:
            await table.advance()
        except AgentError as error:
            outcome.append(error)

    with anyio.fail_after(HANG_GUARD):
        async with connect(**STDIO) as client:
            await tavern(client, bran=lines("[neutral] A long story...", delay_ms=600_000), cora=lines("[neutral] Hm."))
            table = await client.create_conversation("table", world="tavern", members=["bran", "cora"])
            async with anyio.create_task_group() as tg:
                tg.start_soon(advance, table)
                while not (await client.list_conversations())[0]["busy"]:
                    await anyio.sleep(0.05)
                cancelled = await table.cancel()
            state = await table.state()
    [error] = outcome
    assert isinstance(error, AgentError) and error.code is ErrorCode.CANCELLED
    assert cancelled >= 1 and state["lines"] == []
