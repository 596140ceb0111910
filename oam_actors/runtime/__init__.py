"""The actor runtime: actors with an ordered and a control lane, hosted by an ``ActorSystem``.

Knows nothing of the protocol. ``LocalSystem`` runs every actor in this process on anyio::

    async with LocalSystem() as system:
        ref = system.spawn(Address("npc", "gorm"), Gorm)
        reply = ref.ask_nowait(Greet("hi"))   # queued before this line returns
        print(await reply.wait())

See ``ActorSystem`` for the contract every runtime keeps and ``Actor`` for the hooks. A runtime
that moves actors to other processes learns what must not be pickled by value from the layers
that define it (``register_endpoint``, ``register_shared`` with its ``Replication``; see
``_crossing``), which objects it
runs once for every process instead (``register_hosted``; see ``_hosting``), and actors write
checkpoints that hold endpoints with ``dumps_state`` / ``loads_state``.
"""

from oam_actors.runtime._actor import Actor, ActorSystem
from oam_actors.runtime._address import Address
from oam_actors.runtime._admission import Admission, AdmissionGate, Arrival, GateStatistics, current_flow, flow
from oam_actors.runtime._fair import FairQueue
from oam_actors.runtime._yielding import FairYield, fair_pause, fair_yield
from oam_actors.runtime._crossing import (
    EndpointKind,
    EndpointReferences,
    Relay,
    Replication,
    detached_copy,
    dumps_state,
    endpoint_kind,
    held_by_reference,
    loads_state,
    register_endpoint,
    register_shared,
    replication_of,
    use_endpoint_references,
)
from oam_actors.runtime._hosting import Hosting, hosting_of, register_hosted
from oam_actors.runtime._errors import (
    ActorExists,
    ActorStopped,
    HostFailed,
    MailboxFull,
    MessageCancelled,
    RuntimeErrorBase,
)
from oam_actors.runtime._local import LocalSystem
from oam_actors.runtime._durable import CheckpointFailed, Durability, StaleVersion
from oam_actors.runtime._store import (
    SCHEMA_VERSION,
    SqliteStore,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreMissing,
    StoreRecord,
    StoreTooNew,
    StoreTooOld,
    open_store,
)
from oam_actors.runtime._ref import ActorRef, Reply
from oam_actors.runtime._statistics import ActorStatistics
from oam_actors.runtime._system import DEFAULT_MAX_QUEUE, ExcInfo, SystemBase, SystemState
from oam_actors.runtime._tuning import tune_gc_for_servers

__all__ = [
    "DEFAULT_MAX_QUEUE",
    "SCHEMA_VERSION",
    "Actor",
    "ActorExists",
    "ActorRef",
    "ActorStatistics",
    "ActorStopped",
    "ActorSystem",
    "Address",
    "Admission",
    "AdmissionGate",
    "Arrival",
    "CheckpointFailed",
    "Durability",
    "EndpointKind",
    "EndpointReferences",
    "ExcInfo",
    "FairQueue",
    "FairYield",
    "GateStatistics",
    "HostFailed",
    "Hosting",
    "LocalSystem",
    "MailboxFull",
    "MessageCancelled",
    "Relay",
    "Replication",
    "Reply",
    "RuntimeErrorBase",
    "SqliteStore",
    "StaleVersion",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "StoreMissing",
    "StoreRecord",
    "StoreTooNew",
    "StoreTooOld",
    "SystemBase",
    "SystemState",
    "current_flow",
    "detached_copy",
    "dumps_state",
    "endpoint_kind",
    "fair_pause",
    "fair_yield",
    "flow",
    "held_by_reference",
    "hosting_of",
    "loads_state",
    "open_store",
    "register_endpoint",
    "register_hosted",
    "register_shared",
    "replication_of",
    "tune_gc_for_servers",
    "use_endpoint_references",
]

# Tracebacks and reprs show the public home of each name.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = __name__
del _name, _obj
