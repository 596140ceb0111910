"""Running on Ray: ``RaySystem`` (object actors in shard Ray actors), state stores, model actors.

::

    async with RaySystem(shards=2, address="auto") as system:      # or address=None: local Ray
        bridge = Bridge(system, write)                             # as with LocalSystem
        ...

``RaySystem`` keeps the ``ActorSystem`` contract (see its module for the differences), checkpoints
committed object state to a :class:`StateStore` (a :class:`MemoryStore` by default; durable
objects to the state store of ``runtime.Durability``) and restores it after a shard restart. :func:`host_model` shares one model backend, and its quota, across the
cluster. How to run a cluster: ``cluster/README.md``. Importing this package imports Ray;
nothing else in ``oam_actors`` does.
"""

from .models import MODEL_NAMESPACE, ClusterModel, RemoteModel, host_model, stop_model
from .store import MemoryStore, StateStore
from .system import LOCAL_RAY_OPTIONS, RaySystem, ShardInfo, private_ray, shard_of

__all__ = [
    "LOCAL_RAY_OPTIONS",
    "MODEL_NAMESPACE",
    "ClusterModel",
    "MemoryStore",
    "RaySystem",
    "RemoteModel",
    "ShardInfo",
    "StateStore",
    "host_model",
    "private_ray",
    "shard_of",
    "stop_model",
]

# Tracebacks and reprs show the public home of each class.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = __name__
del _name, _obj
