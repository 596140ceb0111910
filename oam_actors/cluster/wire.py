"""What crosses the Ray boundary between a ``RaySystem`` driver and its shards.

Driver → shard: batches of *ops* (``Spawn``, ``Ask``, ``Tell``, ``Control``, ``CancelOne``,
``CancelAll``, ``Stop``), applied by the shard in order. Shard → driver: one ordered stream of
*items* (``Done``, ``Saved``, ``Out``, ``Unhosted``), in batches, so everything an actor produced before its
reply (events, tool calls, its checkpoint) reaches the driver before that reply.

Between shards, through the driver (which forwards in the order it receives): an actor's message
to an actor on another shard (item ``Forward``, cancelled by ``ForwardCancel``; its outcome comes
back as the op ``Answer``), and a shared object's replica (item ``Follow``: the driver asks the
owner's shard with ``Replicate``, whose ``Push`` items of changes reach the holder's shard as
``Apply``; ``Refollow`` after the owner's shard restarted).

Ops and items are msgspec Structs, and a batch of them travels as one MessagePack frame
(:func:`encode_ops` / :func:`decode_ops`, :func:`encode_items` / :func:`decode_items`): encoded
once, with no pickling of the envelope. What is inside them and may be any object travels pickled
(``pickle``: plain serialisable values, as the runtime contract asks): messages, results, outlet
calls, checkpoints (bytes the actor made), exceptions that pickle. Actors travel as a whole (:func:`dumps_actor`): the driver builds the actor with
the caller's factory and ships it. Some objects travel *by reference* (``persistent_id``), as
their layer declared them to the runtime: an endpoint such as a connection's outlet (its number
and kind; the shard gets a relaying stand-in, :mod:`.endpoints`), and state one actor shares with
others in its process (a :class:`SharedRef`; the shard gets the live object, :mod:`.shared`).
Exceptions travel as :class:`Failure`, because the protocol's errors do not pickle.
"""

from __future__ import annotations

import contextvars
import copyreg
import io
import operator
import pickle
from collections.abc import Callable
from typing import Any

from ray import cloudpickle
import msgspec

from ..errors import AgentError, ErrorCode, OamError, ProtocolError
from ..runtime import Actor, Address, held_by_reference

__all__ = [
    "Ask",
    "CancelAll",
    "CancelOne",
    "Control",
    "Answer",
    "Apply",
    "Done",
    "Failure",
    "Follow",
    "Forward",
    "ForwardCancel",
    "Push",
    "Refollow",
    "Replicate",
    "Hello",
    "Item",
    "Op",
    "Out",
    "Reference",
    "Resolve",
    "Saved",
    "Substitute",
    "SharedRef",
    "Spawn",
    "Stop",
    "Tell",
    "Unhosted",
    "ValueWriter",
    "decode_items",
    "decode_ops",
    "dumps_actor",
    "dumps_value",
    "encode_items",
    "encode_ops",
    "loads_actor",
    "loads_value",
]

# --- ops: driver → shard -------------------------------------------------------------------------


class SharedRef(msgspec.Struct, frozen=True, array_like=True):
    """The object the actor at ``owner`` hands out for control ``message`` (pickled), shared by
    reference with actors on its shard (a world's document with its NPCs)."""

    owner: Address
    message: bytes


class Spawn(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """Host the pickled ``actor`` at ``address``; ``state`` (a checkpoint) is restored first;
    ``shares`` are the objects of other actors it holds by reference."""

    address: Address
    actor: bytes
    max_queue: int
    state: bytes | None = None
    shares: list[SharedRef] = []
    remote: list[bool] = []  # per share: its owner is on another shard (the actor gets a replica)


class Ask(msgspec.Struct, frozen=True, array_like=True, tag=True):
    seq: int
    address: Address
    message: bytes
    flow: str = ""  # whose work it is at the shard's admission gate (``runtime.flow``)


class Tell(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """An ask whose reply nobody waits for: its ``Done`` (numbered ``seq``) carries no value,
    only a failure, and frees its place in the driver's count of the actor's mailbox."""

    seq: int
    address: Address
    message: bytes
    flow: str = ""


class Control(msgspec.Struct, frozen=True, array_like=True, tag=True):
    seq: int
    address: Address
    message: bytes


class CancelOne(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """Cancel the ask numbered ``seq``."""

    seq: int


class CancelAll(msgspec.Struct, frozen=True, array_like=True, tag=True):
    address: Address


class Stop(msgspec.Struct, frozen=True, array_like=True, tag=True):
    seq: int
    address: Address


class _Outcome(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """The outcome of a request numbered ``seq``: a pickled value or a failure (each subclass is
    its own tag, for one direction)."""

    seq: int
    value: bytes | None = None
    failure: Failure | None = None


class Answer(_Outcome):
    """The outcome of this shard's ``Forward`` or ``Follow`` numbered ``seq``."""


class Replicate(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """Answer ``seq`` with a detached copy of ``share`` (its owner is here) and push its changes
    from now on to shard ``to`` (in place of what was pushed there before)."""

    seq: int
    share: SharedRef
    to: int


class Apply(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """A change of ``share`` (pickled) for its replica here."""

    share: SharedRef
    change: bytes


class Refollow(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """The shard hosting ``owners`` restarted: the replicas of what they share follow them again."""

    owners: list[Address]


Op = Spawn | Ask | Tell | Control | CancelOne | CancelAll | Stop | Answer | Replicate | Apply | Refollow


# --- items: shard → driver -----------------------------------------------------------------------


class Failure(msgspec.Struct, frozen=True, array_like=True):
    """An exception on its way back: pickled whole when it pickles (a protocol error keeps its
    class, code, message and every ``data`` field, ``retry_after`` too: the retry policy and the
    bridge read them on the other side), else a protocol error by its fields, else by its type
    name and text."""

    message: str
    code: str | None = None
    agent: bool = False
    extra: dict[str, Any] = {}
    pickled: bytes | None = None
    type_name: str = ""
    retry_after: float | None = None

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        pickled = _pickled(exc)
        if isinstance(exc, OamError):
            return cls(exc.message, exc.code.wire, isinstance(exc, AgentError), dict(exc.extra), pickled,
                       retry_after=getattr(exc, "retry_after", None))
        if pickled is None:
            return cls(str(exc), type_name=type(exc).__name__)
        return cls(str(exc), pickled=pickled)

    def to_exception(self) -> Exception:
        if self.pickled is not None:
            return pickle.loads(self.pickled)
        if self.code is not None:
            code = ErrorCode.from_wire(self.code)
            extra = {k: v for k, v in self.extra.items() if k not in _RETRY_KEYS}
            if self.agent:
                return AgentError(code, self.message, retry_after=self.retry_after, **extra)
            return ProtocolError(code, self.message, **extra)
        return RuntimeError(f"{self.type_name}: {self.message}")


_RETRY_KEYS = frozenset({"retryAfter", "retryAfterSeconds"})  # AgentError derives them from retry_after


def _pickled(exc: BaseException) -> bytes | None:
    """``exc`` pickled, or ``None`` when it does not pickle or does not load back."""
    try:
        pickled = pickle.dumps(exc)
        pickle.loads(pickled)  # exceptions with required arguments pickle but do not load
    except Exception:  # noqa: BLE001 - any failure means: send it by its fields or as text
        return None
    return pickled


class Done(_Outcome):
    """The outcome of the ask, control call or stop numbered ``seq``."""


class Saved(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """The checkpoint an actor took after a committed message (precedes that message's Done)."""

    address: Address
    state: bytes


class Unhosted(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """The shard could not host the actor at ``address`` (unpickling, ``restore`` or spawn failed)."""

    address: Address
    failure: Failure


class Out(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """A call an actor made on the stand-in for the driver-side endpoint numbered ``endpoint``
    (``call`` pickled: an endpoint kind's calls are its own objects)."""

    endpoint: int
    call: bytes

    @classmethod
    def of(cls, endpoint: int, call: Any) -> Out:
        return cls(endpoint, pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL))

    def loads(self) -> Any:
        return pickle.loads(self.call)


ASK, TELL, CONTROL = 0, 1, 2  # a Forward's kind


class Forward(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """An actor here sends ``message`` (pickled, endpoints by reference) to the actor at
    ``address`` on another shard: ``kind`` ask, tell or control call; answered by ``Answer(seq)``
    (a tell is not)."""

    seq: int
    address: Address
    message: bytes
    kind: int = ASK
    flow: str = ""


class ForwardCancel(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """Cancel the forwarded ask numbered ``seq``; with ``address``, every message of that actor."""

    seq: int
    address: Address | None = None


class Follow(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """An actor here holds ``share``, whose owner is on another shard: a replica, please
    (``Answer(seq)`` with a detached copy; its changes follow as ``Apply``)."""

    seq: int
    share: SharedRef


class Push(msgspec.Struct, frozen=True, array_like=True, tag=True):
    """A change of ``share`` (pickled) for its replica on shard ``to``."""

    to: int
    share: SharedRef
    change: bytes


Item = Done | Saved | Out | Unhosted | Forward | ForwardCancel | Follow | Push


# --- frames: one MessagePack encoding per batch ----------------------------------------------------


_PICKLED_EXT = 1  # MessagePack extension code: a value no plain type holds, pickled


def _enc_hook(obj: Any) -> Any:
    # Only Any-typed fields (a protocol error's ``extra``) can hold something MessagePack lacks:
    # pickled, or as its text when it does not pickle (an error must cross all the same).
    try:
        return msgspec.msgpack.Ext(_PICKLED_EXT, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # noqa: BLE001 - whatever stops it pickling
        return repr(obj)


def _ext_hook(code: int, data: memoryview) -> Any:
    if code != _PICKLED_EXT:
        raise ValueError(f"unknown MessagePack extension {code}")
    return pickle.loads(data)


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_ops = msgspec.msgpack.Decoder(list[Op], ext_hook=_ext_hook)
_items = msgspec.msgpack.Decoder(list[Item], ext_hook=_ext_hook)


def encode_ops(ops: list[Op]) -> bytes:
    """A batch of ops as one frame's payload."""
    return _encoder.encode(ops)


def decode_ops(payload: bytes | memoryview) -> list[Op]:
    return _ops.decode(payload)


def encode_items(items: list[Item]) -> bytes:
    """A batch of items as one frame's payload."""
    return _encoder.encode(items)


def decode_items(payload: bytes | memoryview) -> list[Item]:
    return _items.decode(payload)


class Hello(msgspec.Struct, frozen=True, array_like=True):
    """A shard's answer to ``ping``: who it is now (a restart changes ``incarnation``) and where
    its data path listens (``token`` opens it): TCP at ``host``:``port``, and, for a driver on
    the same node (``node_id``), the Unix socket ``path`` ("" if none)."""

    incarnation: str
    pid: int
    node_id: str
    host: str
    port: int
    token: bytes
    path: str = ""


# --- values --------------------------------------------------------------------------------------


Reference = Callable[[Any], Any]
"""Asked by our picklers about an object: to keep it by reference, the reference (an
``EndpointRef``, a :class:`SharedRef`…); ``None`` to pickle it by value."""

Resolve = Callable[[Any], Any]
"""The object standing for a reference on this side (when unpickling)."""


def dumps_value(value: Any, reference: Reference | None = None) -> bytes:
    """A message or result; ``reference`` as for :func:`dumps_actor` (messages may name the
    connection to answer, an outlet), asked only about objects whose type may be held by
    reference (``runtime.held_by_reference``). Raises ``TypeError`` naming what does not pickle."""
    if reference is not None:
        return ValueWriter(reference).dumps(value)
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise _not_crossing(value, exc) from exc


def _not_crossing(value: Any, exc: Exception) -> TypeError:
    return TypeError(f"{type(value).__name__} cannot cross to another process: {exc}")


class ValueWriter:
    """:func:`dumps_value` with one ``reference``, for a sender that pickles many values: how each
    type pickles is looked up once per writer (in the pickler's ``dispatch_table``), so the C
    pickler calls back into Python only for the objects that may travel by reference (a hook
    such as ``reducer_override`` is called for every object that is not a str, number or plain
    container: 8 calls for an ``npc/talk`` message). One pickler and buffer serve every value
    (its memo cleared each time). Types registered with ``runtime`` after the writer first met
    them are not seen as such: make a writer after the imports that register."""

    def __init__(self, reference: Reference) -> None:
        self._table = _ReduceTable(reference)
        self._buffer = io.BytesIO()
        self._pickler = self._new_pickler(self._buffer)
        self._busy = False  # dumping: a value pickled from ``reference`` gets a pickler of its own

    def dumps(self, value: Any) -> bytes:
        if self._busy:
            buffer = io.BytesIO()
            self._dump(self._new_pickler(buffer), value)
            return buffer.getvalue()
        buffer = self._buffer
        buffer.seek(0)
        buffer.truncate()
        self._pickler.clear_memo()
        self._busy = True
        try:
            self._dump(self._pickler, value)
        finally:
            self._busy = False
        return buffer.getvalue()

    def _new_pickler(self, buffer: io.BytesIO) -> pickle.Pickler:
        pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = self._table
        return pickler

    @staticmethod
    def _dump(pickler: pickle.Pickler, value: Any) -> None:
        try:
            pickler.dump(value)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise _not_crossing(value, exc) from exc


_REDUCE_EX = operator.methodcaller("__reduce_ex__", pickle.HIGHEST_PROTOCOL)  # what pickle does by default
_BY_NAME = operator.attrgetter("__qualname__")  # a class (of a metaclass): pickled by name, as by default


class _ReduceTable(dict[type, Callable[[Any], Any]]):
    """A pickler's ``dispatch_table``: for each type met, how its objects reduce. Types that may be
    held by reference ask ``reference``, which a reference travels as a call of
    :func:`_referenced` (resolved by :func:`loads_value`); the others reduce as without the
    table (``copyreg``'s reducers included), in C."""

    def __init__(self, reference: Reference) -> None:
        super().__init__()
        self._reference = reference

    def __missing__(self, cls: type) -> Callable[[Any], Any]:
        if issubclass(cls, type):
            reduce: Callable[[Any], Any] = _BY_NAME
        elif held_by_reference(cls):
            reduce = self._reduce_referenced
        else:
            reduce = copyreg.dispatch_table.get(cls, _REDUCE_EX)
        self[cls] = reduce
        return reduce

    def _reduce_referenced(self, obj: Any) -> Any:
        if (ref := self._reference(obj)) is None:
            return _REDUCE_EX(obj)
        return _referenced, (ref,)


def loads_value(data: bytes, resolve: Resolve | None = None) -> Any:
    """What :func:`dumps_value` or a :class:`ValueWriter` pickled; ``resolve(reference)`` gives
    what stands for each reference. The C unpickler runs alone (a subclass would call Python
    for every global: a message names several): a reference loads as a call of
    :func:`_referenced`, which asks the ``resolve`` of the load under way."""
    if resolve is None:
        return pickle.loads(data)
    token = _RESOLVING.set(resolve)
    try:
        return pickle.loads(data)
    finally:
        _RESOLVING.reset(token)


_RESOLVING: contextvars.ContextVar[Resolve | None] = contextvars.ContextVar("oam_actors_resolving", default=None)


def _referenced(ref: Any) -> Any:
    resolve = _RESOLVING.get()
    if resolve is None:
        raise pickle.UnpicklingError(f"a value holding the reference {ref!r} was loaded with nothing to resolve it")
    return resolve(ref)


# Never an endpoint nor a shared object's copy (those are instances of registered classes), so
# not asked about: the actor pickler's persistent_id sees every object pickled, mostly these
# (about 1,000 per NPC).
_PLAIN_TYPES = frozenset({str, int, float, bool, type(None), bytes, tuple, list, dict})


Substitute = Callable[[Any], Any]
"""For an object to travel as another (a hosted backend as the stand-in that reaches its host),
that other object; ``None`` to pickle it as it is."""


class _ActorPickler(cloudpickle.Pickler):
    """cloudpickle (actors may hold functions), with some objects kept by reference and some
    replaced by their stand-ins."""

    def __init__(self, file: io.BytesIO, reference: Reference, substitute: Substitute | None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._reference = reference
        self._substitute = substitute

    def persistent_id(self, obj: Any) -> Any:
        return None if type(obj) in _PLAIN_TYPES else self._reference(obj)

    def reducer_override(self, obj: Any) -> Any:
        if self._substitute is not None and (stand_in := self._substitute(obj)) is not None:
            return _itself, (stand_in,)
        return super().reducer_override(obj)


def _itself(obj: Any) -> Any:
    return obj


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, resolve: Resolve) -> None:
        super().__init__(file)
        self._resolve = resolve

    def persistent_load(self, pid: Any) -> Any:
        return self._resolve(pid)


def dumps_actor(actor: Actor, reference: Reference, substitute: Substitute | None = None) -> bytes:
    """Pickle ``actor``; ``reference(obj)`` names the objects to keep by reference,
    ``substitute(obj)`` those to send as a stand-in.

    Raises ``TypeError`` naming the actor when some part of its state does not pickle.
    """
    buffer = io.BytesIO()
    try:
        _ActorPickler(buffer, reference, substitute).dump(actor)
    except Exception as exc:
        raise TypeError(
            f"{type(actor).__name__} cannot move to a shard: {exc}. On RaySystem an actor's state must "
            "pickle (host network models as model actors: oam_actors.cluster.host_model)."
        ) from exc
    return buffer.getvalue()


def loads_actor(data: bytes, resolve: Resolve) -> Actor:
    """The actor ``dumps_actor`` pickled; ``resolve(reference)`` gives what stands for each one."""
    actor = _Unpickler(io.BytesIO(data), resolve).load()
    if not isinstance(actor, Actor):
        raise TypeError(f"expected an Actor, got {type(actor).__name__}")
    return actor
