"""Running on Ray: ``RaySystem`` (object actors in shard Ray actors), state stores, model actors.

Importing this package imports Ray; nothing else in ``oam_actors`` does.
"""

from .models import MODEL_NAMESPACE, RemoteModel, host_model, stop_model
from .store import SqliteStore, StateStore
from .system import LOCAL_RAY_OPTIONS, RaySystem, ShardInfo, shard_of

__all__ = [
    "LOCAL_RAY_OPTIONS",
    "MODEL_NAMESPACE",
    "RaySystem",
    "RemoteModel",
    "ShardInfo",
    "SqliteStore",
    "StateStore",
    "host_model",
    "shard_of",
    "stop_model",
]
