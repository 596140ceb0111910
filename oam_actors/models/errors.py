"""Why a server's models cannot start. These reach the operator, never a protocol client (a
client's own bad ``model`` object is ``invalid_params``, :mod:`oam_actors.errors`)::

    ValueError
    └── ModelConfigError      a model config that cannot run (raised before anything starts)
    RuntimeError
    └── ModelHostError        a model actor that did not start on the Ray cluster

A command-line front end turns a :class:`ModelConfigError` into a usage error naming the option
behind its ``field``; :class:`ModelHostError` is chained (``from``) to the factory's or Ray's error.
"""

from __future__ import annotations

__all__ = ["ModelConfigError", "ModelHostError"]


class ModelConfigError(ValueError):
    """A :class:`~oam_actors.models.setup.ModelConfig` (or a simulation backend's config) that
    cannot run. ``field`` names the setting at fault (``"model"``, ``"devices"``,
    ``"farm_time_scale"``, …); the message says what is allowed and what was given."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class ModelHostError(RuntimeError):
    """A model actor did not start: its factory failed in the actor, or Ray could not host it.
    Raised by :class:`~oam_actors.cluster.ClusterModel`; the message names the model."""
