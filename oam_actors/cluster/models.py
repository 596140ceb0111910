"""Model actors: one named Ray actor per shared backend, used by every shard and connection.

A device pool or a proxy's API key is one quota. Hosted once per cluster as a named, detached
Ray actor (:func:`host_model`), every session and NPC on every shard and every driver reaches
the same instance (and the same :class:`~oam_actors.models.scheduler.QuotaScheduler` inside
it), so the quota is enforced once for the whole cluster. Scripted models need none of this:
they stay inside the shard with their session.

- ``host_model(name, factory)`` starts the actor ``oam-model:<name>`` (or finds the one already
  running) and returns a :class:`RemoteModel`. ``factory`` runs inside the actor and must pickle
  (a module-level function or a ``functools.partial`` of one); if it returns an async context
  manager (a ``DevicePool``, or one yielding the model), that is entered there for the actor's
  lifetime and the model is what entering it returns. A factory that fails fails ``host_model``
  with its error (the actor stays: stop it).
- :class:`RemoteModel` is a :class:`~oam_actors.agent.LanguageModel` that pickles as its name,
  so sessions carrying it move to shards freely. ``stream`` relays the hosted model's pieces
  (Ray streaming generator); closing it early cancels the remote generation; the hosted model's
  ``AgentError`` is raised as is.
- :func:`stop_model` ends the actor and returns once it is gone. Detached actors outlive
  drivers: stop what you host;
  :func:`model_running` tells whether one is hosted already.
- :class:`ClusterModel` does all three for a server's system model: ``async with
  ClusterModel(name, factory)`` hosts it (or joins the one running), ``model()`` is the bridge's
  system model factory, and leaving stops the actor only if this one started it. A model that
  does not start raises :class:`~oam_actors.models.errors.ModelHostError`, chained from the
  factory's (or Ray's) error.

**Backends sessions name** are hosted the same way, lazily. A model type its layer declared
hosted (``runtime.register_hosted``: a proxy backend's :class:`~oam_actors.models.proxy.SharedProxyModel`,
a set of phones' :class:`~oam_actors.models.device_backends.SharedDeviceModel`)
travels to a shard as :func:`remote_model` of its hosting: a :class:`RemoteModel` named after the
backend's quota key that starts the model actor on first use, in whichever process needs it
first (``get_if_exists``: concurrent first uses from many shards and front doors find one actor),
and sends its holder's own settings (the hosting's variant) with every step. These actors belong
to the cluster, not to a driver: detached, never stopped by a front door, so every front door,
now and later, shares the one scheduler and what it learned.

**Restarts.** Every model actor is restarted by Ray when its process dies (``max_restarts=-1``).
A step that was running fails with ``generation_failed`` (the agent retries the step, never a
tool, and the retry waits for the restarted actor). A backend that keeps quota state
(``models.SupportsQuotaState``) checkpoints it, at most every :data:`QUOTA_CHECKPOINT_SECONDS`
while it changes, to the cluster's quota keeper (a named detached actor, :class:`QuotaKeeper`,
in memory: it lives on as long as its node does); the restarted actor goes on from it, aged by the
wall time since, so a restart cannot burst the quota. The keeper is an actor rather than the
driver's state store because a model actor belongs to no driver (any front door may be gone
when it restarts) and may run on any node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self, cast

import anyio
import anyio.to_thread
import msgspec
import ray
import ray.exceptions

from ..agent import Availability, GenerationRequest, LanguageModel, ModelCapabilities, Usage
from ..errors import AgentError, ErrorCode
from ..models import SupportsQuotaState, SupportsStatistics
from ..models.errors import ModelHostError
from ..models.scheduler import QuotaState
from ..runtime import Hosting, hosting_of
from .wire import Failure

__all__ = [
    "MODEL_NAMESPACE",
    "QUOTA_CHECKPOINT_SECONDS",
    "ClusterModel",
    "ModelHost",
    "QuotaKeeper",
    "RemoteModel",
    "host_model",
    "hosted_reduce",
    "model_running",
    "remote_model",
    "stop_model",
]

_log = logging.getLogger(__name__)

MODEL_NAMESPACE = "oam-actors"
"""The Ray namespace of model actors: shared by every driver that uses it."""

QUOTA_CHECKPOINT_SECONDS = 0.25
"""How often, at most, a model actor saves its changed quota state to the keeper."""

_KEEPER_NAME = "oam-quota-keeper"
_MODEL_OPTIONS: dict[str, Any] = {
    "lifetime": "detached",
    "get_if_exists": True,
    "max_restarts": -1,  # a dead model actor is always replaced; its quota state is kept
    "max_task_retries": 0,  # a step that died with it fails here, retried by the agent
    "max_concurrency": 1000,
    "num_cpus": 0,
}
_saved_states = msgspec.msgpack.Decoder(tuple[float, dict[str, QuotaState]])
_encode = msgspec.msgpack.Encoder()


def _actor_name(name: str) -> str:
    return f"oam-model:{name}"


class QuotaKeeper:
    """The body of the quota keeper: the latest quota state of each model actor, by name."""

    def __init__(self) -> None:
        self._states: dict[str, bytes] = {}

    def put(self, name: str, state: bytes) -> None:
        self._states[name] = state

    def get(self, name: str) -> bytes | None:
        return self._states.get(name)


_Keeper = ray.remote(QuotaKeeper)


_keepers: dict[str, Any] = {}


def _keeper(namespace: str) -> Any:
    """The quota keeper of ``namespace`` (started by the first model actor that needs it)."""
    if namespace not in _keepers:
        _keepers[namespace] = _Keeper.options(name=_KEEPER_NAME, namespace=namespace, lifetime="detached",
                                              get_if_exists=True, max_restarts=-1, num_cpus=0).remote()
    return _keepers[namespace]


class ModelHost:
    """The body of a model actor: the model ``factory`` builds, behind three calls.

    A call with a ``variant`` is served by the built backend's ``for_variant(variant)`` (a
    family of models on one quota: :class:`~oam_actors.models.proxy.ProxyBackends`). With a
    ``name`` (its actor's), a backend that keeps quota state checkpoints it to the keeper and
    goes on from the last checkpoint when the actor restarts.
    """

    def __init__(self, factory: Callable[[], Any], name: str | None = None, namespace: str = MODEL_NAMESPACE) -> None:
        self._factory = factory
        self._name = name
        self._namespace = namespace
        self._model: Any = None
        self._failure: Exception | None = None
        self._ready: anyio.Event | None = None

    async def capabilities(self, variant: Any = None) -> ModelCapabilities:
        return (await self._loaded(variant)).capabilities

    async def availability(self, variant: Any = None) -> Availability:
        return await (await self._loaded(variant)).availability()

    async def statistics(self, variant: Any = None) -> msgspec.Struct | None:
        """The model's own ``statistics()`` record (``None`` if it keeps none)."""
        model = await self._loaded(variant)
        return await model.statistics() if isinstance(model, SupportsStatistics) else None

    async def stream(self, request: GenerationRequest, variant: Any = None) -> AsyncIterator[str | Usage | Failure]:
        """The model's pieces; a failure comes as a last :class:`Failure` (errors do not pickle)."""
        pieces = (await self._loaded(variant)).stream(request)
        try:
            async for piece in pieces:
                yield piece
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who raises it
            yield Failure.of(exc)
        finally:
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _loaded(self, variant: Any = None) -> LanguageModel:
        if self._ready is None:
            self._ready = anyio.Event()
            # The model's root task: a context-managed model (a device pool) is entered and left
            # on it; Ray owns the loop, so it lives as long as the actor.
            asyncio.get_running_loop().create_task(self._host())
        await self._ready.wait()
        if self._failure is not None:
            raise self._failure
        assert self._model is not None
        return cast(LanguageModel, self._model if variant is None else self._model.for_variant(variant))

    async def _host(self) -> None:
        try:
            made = self._factory()
            if not hasattr(made, "__aenter__"):
                await self._serve(made)
                return
            async with made as model:
                await self._serve(model)
                await anyio.sleep_forever()
        except Exception as exc:  # noqa: BLE001 - each call raises it: none waits forever
            self._failure = exc
            self._model = None
            assert self._ready is not None
            self._ready.set()

    async def _serve(self, model: Any) -> None:
        assert self._ready is not None
        if self._name is not None and isinstance(model, SupportsQuotaState):
            await self._restore(model)
            asyncio.get_running_loop().create_task(self._checkpoint(model))
        self._model = model
        self._ready.set()

    async def _restore(self, model: SupportsQuotaState) -> None:
        saved = await _keeper(self._namespace).get.remote(self._name)
        if saved is None:
            return
        at, states = _saved_states.decode(saved)
        age = max(0.0, time.time() - at)
        model.restore_quota_state({key: state.aged(age) for key, state in states.items()})
        _log.info("model actor %s went on from its quota state of %.1f s ago", self._name, age)

    async def _checkpoint(self, model: SupportsQuotaState) -> None:
        """Save the quota state every QUOTA_CHECKPOINT_SECONDS while anything is spent or cooling
        down, and once more when it goes idle (what it learned stays in the last one)."""
        keeper, was_busy = _keeper(self._namespace), False
        while True:
            await anyio.sleep(QUOTA_CHECKPOINT_SECONDS)
            states = model.quota_state()
            busy = any(state.window or state.cool_down for state in states.values())
            if busy or was_busy:
                await keeper.put.remote(self._name, _encode.encode((time.time(), states)))
            was_busy = busy


_ModelActor = ray.remote(ModelHost)


class RemoteModel:
    """A hosted model seen from anywhere in the cluster; pickles as its name and capabilities
    (and, for a backend hosted on first use, its factory and its holder's variant)."""

    def __init__(self, name: str, capabilities: ModelCapabilities, namespace: str = MODEL_NAMESPACE, *,
                 variant: Any = None, factory: Callable[[], Any] | None = None) -> None:
        self.name = name
        self.namespace = namespace
        self.variant = variant
        self._capabilities = capabilities
        self._factory = factory
        self._actor: Any = None  # looked up (or hosted) on first use in each process

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    async def availability(self) -> Availability:
        with _actor_failures(self.name):
            return await self._handle().availability.remote(self.variant)

    async def statistics(self) -> msgspec.Struct | None:
        """The hosted model's ``statistics()`` record, fetched from its model actor (``None``
        if it keeps none): the same record it returns where it runs."""
        with _actor_failures(self.name):
            return cast(msgspec.Struct | None, await self._handle().statistics.remote(self.variant))

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        # Owners are named per front door: two servers' "guard" sessions are two owners to queue fairly.
        request = msgspec.structs.replace(request, owner=f"{_job()}/{request.owner or 'anonymous'}")
        pieces = self._handle().stream.options(num_returns="streaming").remote(request, self.variant)
        finished = False
        try:
            with _actor_failures(self.name):
                async for ref in pieces:
                    piece = await ref
                    if isinstance(piece, Failure):
                        finished = True
                        raise piece.to_exception()
                    yield piece
            finished = True
        finally:
            if not finished:
                ray.cancel(pieces)  # closed early: the hosted model stops generating

    def _handle(self) -> Any:
        if self._actor is None:
            name = _actor_name(self.name)
            if self._factory is None:
                self._actor = ray.get_actor(name, namespace=self.namespace)
            else:
                self._actor = _start(self.name, self._factory, self.namespace)
        return self._actor

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_actor": None}

    def __repr__(self) -> str:
        return f"RemoteModel({self.name!r})"


def remote_model(hosting: Hosting, namespace: str = MODEL_NAMESPACE) -> RemoteModel:
    """The stand-in of a hosted backend: its model actor, started on first use."""
    return RemoteModel(hosting.name, hosting.info, namespace, variant=hosting.variant, factory=hosting.factory)


def hosted_reduce(obj: Any) -> RemoteModel | None:
    """What a shard gets instead of ``obj`` if its type is hosted (``RaySystem``'s crossing rule)."""
    hosting = hosting_of(obj)
    return None if hosting is None else remote_model(hosting)


def _start(name: str, factory: Callable[[], Any], namespace: str) -> Any:
    """The model actor ``name``, started with ``factory`` unless it runs already. Concurrent
    first uses agree on one actor: Ray creates a name once (``get_if_exists``), and a loser of
    that race finds the winner's."""
    try:
        return _ModelActor.options(name=_actor_name(name), namespace=namespace, **_MODEL_OPTIONS).remote(
            factory, name, namespace)
    except ValueError:  # the name was taken between Ray's check and its creation
        return ray.get_actor(_actor_name(name), namespace=namespace)


_job_id: str | None = None


def _job() -> str:
    global _job_id
    if _job_id is None:
        _job_id = ray.get_runtime_context().get_job_id()
    return _job_id


@contextmanager
def _actor_failures(name: str) -> Iterator[None]:
    """Around a call to a model actor: its death, or its restart, is a retryable step failure."""
    try:
        yield
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError) as exc:
        raise AgentError(
            ErrorCode.GENERATION_FAILED,
            f"The model actor {name!r} stopped during the step; it is restarted and the step retried.",
        ) from exc


def host_model(name: str, factory: Callable[[], Any], *, namespace: str = MODEL_NAMESPACE) -> RemoteModel:
    """Start the model actor ``name`` (or find the running one; ``factory`` is then unused) and
    return its :class:`RemoteModel`. Needs ``ray.init`` first; blocks until the model is built."""
    handle = _start(name, factory, namespace)
    try:
        capabilities = cast(ModelCapabilities, ray.get(handle.capabilities.remote()))  # type: ignore[attr-defined]
    except ray.exceptions.RayTaskError as exc:
        raise exc.cause from exc  # the factory's own error
    return RemoteModel(name, capabilities, namespace)


def model_running(name: str, *, namespace: str = MODEL_NAMESPACE) -> bool:
    """Whether the model actor ``name`` is hosted (by anyone). Needs ``ray.init`` first."""
    try:
        ray.get_actor(_actor_name(name), namespace=namespace)
    except ValueError:
        return False
    return True


def stop_model(name: str, *, namespace: str = MODEL_NAMESPACE) -> bool:
    """End the model actor ``name`` and return once it is gone (its name free: hosting it again
    starts a new one); ``False`` if none runs. Blocks: call it off the event loop."""
    try:
        handle = ray.get_actor(_actor_name(name), namespace=namespace)
    except ValueError:
        return False
    ray.kill(handle)  # asynchronous: the actor dies, and its name is freed, a moment later
    while True:  # each round trip is answered by the live actor or fails once Ray has it dead
        try:
            ray.get(handle.__ray_ready__.remote())
        except ray.exceptions.RayActorError:
            break
    while model_running(name, namespace=namespace):  # Ray frees the name as it declares the death
        pass
    return True


class ClusterModel:
    """The system model hosted once on the Ray cluster as the model actor ``name``, built there
    by ``factory`` (picklable); :meth:`model` is the system model factory (its ``RemoteModel``).

    Enter it while Ray is up (inside the ``RaySystem``). It stops the model actor on exit only
    if it started it: a server joining a cluster where the same system model runs shares it.
    Entering raises :class:`~oam_actors.models.errors.ModelHostError` when the model does not start.
    """

    def __init__(self, name: str, factory: Callable[[], Any]) -> None:
        self.name = name
        self.factory = factory
        self._model: RemoteModel | None = None
        self._started = False

    @staticmethod
    def stand_in(model: LanguageModel) -> LanguageModel:
        """``model`` as every process of the cluster reaches it: the :class:`RemoteModel` of its
        model actor if its type is hosted (hosted on first use, never stopped by this driver)."""
        remote = hosted_reduce(model)
        return model if remote is None else remote

    def model(self) -> RemoteModel:
        if self._model is None:
            raise RuntimeError("the model actor is not hosted (use it inside `async with ClusterModel`)")
        return self._model

    async def __aenter__(self) -> Self:
        self._started = not model_running(self.name)
        try:
            # Blocks until the backend is built in the model actor (a farm's phones started).
            self._model = await anyio.to_thread.run_sync(host_model, self.name, self.factory)
        except Exception as exc:
            if self._started:
                await anyio.to_thread.run_sync(stop_model, self.name)
            raise ModelHostError(f"the model {self.name!r} did not start: {exc}") from exc
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._model = None
        if self._started:
            await anyio.to_thread.run_sync(stop_model, self.name)
