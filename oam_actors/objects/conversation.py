"""ConversationActor: a conversation among NPCs (and optionally the player) behind an ordered mailbox.

Contract
--------
- Ordered lane (arrival order, one at a time): :class:`Advance` (one or more lines),
  :class:`JoinConversation`, :class:`LeaveConversation`, and the actor's own
  :class:`TakeInterjections`. Control lane: :class:`DescribeConversation` (the state as wire
  values) and :class:`PlayerSays`: the player speaks at any point; a running :class:`Advance`
  takes the line before its next one (it is one of that request's lines), else the actor's own
  :class:`TakeInterjections`, queued at once, commits it; the say is answered once it is committed.
- A line is asked of its speaker's NPC actor (:class:`~oam_actors.objects.npc.Converse`, on that
  NPC's ordered lane): the conversation orders its lines, each NPC orders its own work, so a talk
  with the player waits for at most the line in progress, never for a whole conversation. The
  conversation holds no admission slot while it waits (the NPC's line takes one).
- An :class:`Advance` commits when its last line is in: then the lines join the conversation and
  every member hears them (:class:`~oam_actors.objects.npc.Hear`, as notes in its memory; the
  audience, and the NPCs the world state puts at the conversation's ``location``, as overheard). Cancelled before that, it leaves no trace: no line, no memory (the line
  in progress is cancelled on its NPC's lane too).
- Listeners: each hears on its own ordered lane (after the work queued there before), and the
  request's reply waits until every listener has remembered the lines, so whoever is answered
  after it finds them in each listener's memory (with a state store: in its checkpoint, written
  before the conversation's own). A listener whose mailbox is full, that is deleted meanwhile or
  that fails (its store write, its shard) misses them: logged, named in the reply's ``unheard``,
  and the request goes on.
- Events (``stream``) go to the request's outlet as ``conversation/event`` with
  ``{"conversation", "requestId", "event"}`` (a speaker's deltas and emotion also carry ``npc``),
  all before the response.
- Checkpoints: the conversation state and its members' addresses (each NPC's id in its
  namespace, never a ref: whoever revives a stored conversation revives its members). A say's
  answer waits for the commit that took its line to be durable (:class:`TakeInterjections` is
  asked, and answers after every commit queued before it).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import anyio
import msgspec

from ..clock import Budget
from ..errors import ErrorCode, ProtocolError, cancelled, invalid_params
from ..game.conversation import (
    PLAYER,
    ConversationLine,
    ConversationState,
    LineReply,
    Member,
    addressee_of,
    heard_note,
    located_at,
    next_speaker,
    spoken,
    view_for,
)
from ..game import WorldState
from ..runtime import Actor, ActorStopped, Address, MailboxFull, MessageCancelled, Reply
from .npc import Converse, Hear
from .outlet import Outlet, RequestId
from .session import object_id

__all__ = [
    "Advance",
    "ConversationActor",
    "ConversationCheckpoint",
    "DescribeConversation",
    "JoinConversation",
    "LeaveConversation",
    "PlayerSays",
    "TakeInterjections",
]

_log = logging.getLogger(__name__)
NPC_KIND = "npc"


class Advance(msgspec.Struct, frozen=True, kw_only=True):
    """Up to ``count`` lines (fewer when the conversation ends or it is the player's turn);
    ``speaker`` (a member) says the first of them."""

    request_id: RequestId
    count: int = 1
    stream: bool = False
    outlet: Outlet | None = None
    speaker: str | None = None
    budget: Budget | None = None
    coalesce: bool = True


class PlayerSays(msgspec.Struct, frozen=True):
    line: str
    addressee: str | None = None


class TakeInterjections(msgspec.Struct, frozen=True):
    """The actor's own: commit the player's lines no running request has taken."""


class JoinConversation(msgspec.Struct, frozen=True):
    member: Member
    address: Address


class LeaveConversation(msgspec.Struct, frozen=True):
    npc: str


class DescribeConversation(msgspec.Struct, frozen=True):
    pass


@dataclasses.dataclass(eq=False)
class _Interjection:
    """A player's line waiting to be committed; ``error`` when it never will be."""

    line: ConversationLine
    committed: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    error: Exception | None = None
    unheard: list[str] = dataclasses.field(default_factory=list)  # the listeners that missed its commit


class ConversationCheckpoint(msgspec.Struct, frozen=True):
    state: ConversationState
    addresses: dict[str, Address]


def _unheard(unheard: list[str]) -> dict[str, Any]:
    """The reply's ``unheard`` key: only when some listener missed the lines."""
    return {"unheard": unheard} if unheard else {}


async def _failure(reply: Reply) -> Exception | None:
    """What ``reply`` failed with, or ``None`` once it succeeded."""
    try:
        await reply.wait()
    except Exception as error:  # noqa: BLE001 - a listener's failure is its own: logged, named by the caller
        return error
    return None


def member_gone(npc: str) -> ProtocolError:
    """A member's NPC was deleted while its line was asked for."""
    return ProtocolError(ErrorCode.NPC_NOT_FOUND, f"The member NPC '{npc}' was deleted.", npc=npc)


class ConversationActor(Actor):
    """See the module docstring. ``addresses``: each member's and bystander's NPC actor."""

    def __init__(self, state: ConversationState, outlet: Outlet, addresses: dict[str, Address],
                 world: WorldState | None = None) -> None:
        self.state = state
        self.outlet = outlet
        self.addresses = dict(addresses)
        # The world's document, shared with the world and its NPCs (on Ray, on another shard than
        # the world's, a replica of it): who is at the conversation's location.
        self.world = world
        # The player's lines said and not committed yet, each with the event its say waits on:
        # a running request takes them before its next line, else TakeInterjections does.
        self._interjections: list[_Interjection] = []

    @property
    def conversation_id(self) -> str:
        return object_id(self.address)

    async def handle(self, message: Any) -> Any:
        match message:
            case Advance():
                return await self._advance(message)
            case TakeInterjections():
                taken: list[ConversationLine] = []
                state = self._interjected(self.state, taken)
                if taken:  # else a request took them, and its commit is durable by now
                    self.commit()
                await self._commit_lines(state, taken)
                return None
            case JoinConversation(member=member, address=address):
                self.commit()
                self.addresses[member.npc] = address
                self.state = msgspec.structs.replace(self.state, members=(*self.state.members, member),
                                                     audience=tuple(a for a in self.state.audience if a != member.npc))
                return self._summary()
            case LeaveConversation(npc=npc):
                self.commit()
                state = self.state
                self.state = msgspec.structs.replace(
                    state, members=tuple(m for m in state.members if m.npc != npc),
                    audience=tuple(a for a in state.audience if a != npc),
                    sequence=tuple(s for s in state.sequence if s != npc),
                )
                self.addresses.pop(npc, None)
                return self._summary()
        raise TypeError(f"ConversationActor cannot handle {type(message).__name__}")

    async def handle_control(self, message: Any) -> Any:
        match message:
            case DescribeConversation():
                return {"conversation": self.conversation_id, **self.state.to_wire()}
            case PlayerSays():
                return await self._player_says(message)
        raise TypeError(f"ConversationActor cannot handle {type(message).__name__} on the control lane")

    def snapshot(self) -> bytes:
        return msgspec.json.encode(ConversationCheckpoint(self.state, self.addresses))

    def restore(self, state: bytes) -> None:
        saved = msgspec.json.decode(state, type=ConversationCheckpoint)
        self.state, self.addresses = saved.state, dict(saved.addresses)

    # --- lines -----------------------------------------------------------------------------------

    async def _advance(self, message: Advance) -> dict[str, Any]:
        state = self.state
        outlet = message.outlet if message.outlet is not None else self.outlet
        said: list[ConversationLine] = []
        spoken_by_npcs = 0
        player_turn = False
        forced = message.speaker
        if forced is not None and forced not in state.ids:  # it left after the request was checked
            raise invalid_params(f"Parameter 'speaker': '{forced}' is not a member of the conversation.")
        while spoken_by_npcs < message.count and not (state := self._interjected(state, said, outlet, message)).ended:
            speaker = forced or next_speaker(state)
            forced = None
            if speaker == PLAYER:
                player_turn = True
                break
            name = state.name_of(speaker)
            self._event(outlet, message, {"type": "speaker", "npc": speaker, "name": name})
            reply = await self._line_of(speaker, state, message)
            line = ConversationLine(
                speaker=speaker, name=name, line=reply.line, emotion=reply.emotion,
                addressee=addressee_of(reply.line, speaker, state), is_fallback=reply.is_fallback,
                degraded=reply.degraded,
            )
            self._event(outlet, message, {"type": "line", **line.to_wire()})
            said.append(line)
            spoken_by_npcs += 1
            state = spoken(state, line)
        self.commit()
        unheard = await self._commit_lines(state, said)
        result = self._summary()
        if player_turn:
            self._event(outlet, message, {"type": "playerTurn"})
        if state.ended:
            self._event(outlet, message, {"type": "ended"})
        return {**result, "lines": [line.to_wire() for line in said], **_unheard(unheard)}

    async def _line_of(self, speaker: str, state: ConversationState, message: Advance) -> LineReply:
        ref = self.system.lookup(self.addresses[speaker])
        if ref is None:
            raise member_gone(speaker)
        converse = Converse(
            view=view_for(state, speaker), head={"conversation": self.conversation_id, "npc": speaker},
            request_id=message.request_id, outlet=message.outlet, stream=message.stream, budget=message.budget,
            coalesce=message.coalesce,
        )
        try:
            reply = ref.ask_nowait(converse)
        except (ActorStopped, MailboxFull) as error:
            if isinstance(error, MailboxFull):
                raise ProtocolError(ErrorCode.BUSY, f"The member NPC '{speaker}' has too much queued work.",
                                    npc=speaker) from error
            raise member_gone(speaker) from error
        try:
            value: LineReply = await reply.wait()
        except ActorStopped as error:
            raise member_gone(speaker) from error
        except MessageCancelled as error:
            # Its NPC cancelled the line (npc/cancel, npc/delete): the request fails, no trace.
            if self.system.lookup(self.addresses[speaker]) is None:
                raise member_gone(speaker) from error
            raise cancelled(f"The line of the member NPC '{speaker}' was cancelled.") from error
        except BaseException:
            reply.cancel()  # this request was cancelled: so is the line in progress
            raise
        return value

    async def _player_says(self, message: PlayerSays) -> dict[str, Any]:
        """The player's line, at any point: a running request takes it before its next line (it
        is then one of that request's lines), else the actor's own TakeInterjections, queued now.
        Answered once it is committed and that commit is durable (TakeInterjections' reply comes
        after every commit queued before it)."""
        state = self.state
        if state.player is None:
            raise invalid_params("This conversation has no player: create it with 'player' to speak in it.")
        if state.ended:
            raise ProtocolError(ErrorCode.INVALID_REQUEST, "The conversation has ended.")
        addressee = message.addressee if message.addressee is not None else addressee_of(message.line, PLAYER, state)
        line = ConversationLine(speaker=PLAYER, name=state.player, line=message.line, addressee=addressee)
        entry = _Interjection(line)
        self._interjections.append(entry)
        ref = self.system.lookup(self.address)
        try:
            if ref is None:
                raise ActorStopped(self.address)
            taken = ref.ask_nowait(TakeInterjections())
        except (MailboxFull, ActorStopped):
            self._interjections.remove(entry)
            raise
        await entry.committed.wait()
        if entry.error is not None:
            raise entry.error
        await taken.wait()
        return {**self._summary(), "line": line.to_wire(), **_unheard(entry.unheard)}

    def _interjected(self, state: ConversationState, said: list[ConversationLine], outlet: Outlet | None = None,
                     message: Advance | None = None) -> ConversationState:
        """``state`` with the player's lines not yet in ``said`` added (events when streaming).
        Said on the player's turn, the turn moves on; out of turn, the turn order is unchanged."""
        for entry in self._interjections:
            line = entry.line
            if any(line is other for other in said):
                continue
            if state.ended:
                break
            turn = next_speaker(state) == PLAYER
            after = spoken(state, line)
            state = after if turn else msgspec.structs.replace(after, position=state.position)
            said.append(line)
            if outlet is not None and message is not None:
                self._event(outlet, message, {"type": "line", **line.to_wire()})
        return state

    async def _commit_lines(self, state: ConversationState, lines: list[ConversationLine]) -> list[str]:
        """After ``commit``: the lines join the conversation, its listeners hear them, and the
        player's lines among them are answered. Returns the listeners that missed them."""
        self.state = state
        # Past the commit: an outer cancel must not cut the listeners' wait short (it is bounded
        # by the work queued on each listener's lane before the lines).
        with anyio.CancelScope(shield=True):
            unheard = await self._tell_heard(lines)
        for entry in list(self._interjections):
            if any(entry.line is line for line in lines):
                entry.unheard = unheard
                self._answer(entry)
            elif state.ended:  # the conversation ended before the player's line could be said
                self._answer(entry, ProtocolError(ErrorCode.INVALID_REQUEST, "The conversation has ended."))
        return unheard

    def _answer(self, entry: _Interjection, error: Exception | None = None) -> None:
        self._interjections.remove(entry)
        entry.error = error
        entry.committed.set()

    async def _tell_heard(self, lines: list[ConversationLine]) -> list[str]:
        """Every member hears the lines, the audience and the NPCs at the location overhear them,
        each on its own ordered lane; waits until each has remembered them (its commit made
        durable, with a store). Returns the listeners that missed them (mailbox full, deleted
        meanwhile, failed), each logged: they never fail the request."""
        if not lines:
            return []
        state = self.state
        listeners = [(m.npc, False) for m in state.members] + [(a, True) for a in state.audience]
        present = {npc for npc, _ in listeners}
        listeners += [(npc, True) for npc in self._located() if npc not in present]
        told: list[tuple[str, Reply | Exception]] = []
        for npc, overheard in listeners:
            address = self.addresses.get(npc) or self._npc_address(npc)
            ref = self.system.lookup(address)
            if ref is None:  # no such NPC (a location may name one that does not exist)
                continue
            notes = tuple(heard_note(state, line, npc, overheard=overheard) for line in lines)
            try:
                told.append((npc, ref.ask_nowait(Hear(notes))))
            except (MailboxFull, ActorStopped) as error:
                told.append((npc, error))
        # Sent to all first: the listeners remember concurrently, each after its own queued work.
        unheard: list[str] = []
        for npc, reply in told:
            error = reply if isinstance(reply, Exception) else await _failure(reply)
            if error is not None:
                level = logging.INFO if isinstance(error, ActorStopped | MessageCancelled) else logging.WARNING
                _log.log(level, "NPC %s missed %d lines of conversation %s: %r", npc, len(lines), self.conversation_id,
                         error)  # as info when it is being deleted (stopped, or its queue cancelled)
                unheard.append(npc)
        return unheard

    def _located(self) -> list[str]:
        location = self.state.location
        if location is None or self.world is None:
            return []
        return located_at(self.world.get("npcs"), location)

    def _npc_address(self, npc: str) -> Address:
        """The address of the NPC ``npc`` of this conversation's connection (its namespace)."""
        namespace = self.address.id[: len(self.address.id) - len(self.conversation_id)]
        return Address(NPC_KIND, namespace + npc)

    def _summary(self) -> dict[str, Any]:
        state = self.state
        ended = state.ended
        following = None if ended else next_speaker(state)
        return {
            "conversation": self.conversation_id,
            "members": state.ids,
            "next": following,
            "playerTurn": following == PLAYER,
            "ended": ended,
            "lineCount": len(state.lines),
        }

    def _event(self, outlet: Outlet, message: Advance, event: dict[str, Any]) -> None:
        if message.stream:
            outlet.notify("conversation/event", {
                "conversation": self.conversation_id, "requestId": message.request_id, "event": event,
            })
