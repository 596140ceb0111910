"""A private local Ray instance (``RaySystem()`` without an address, ``private_ray()``) keeps its
session files in a folder of its own and removes it when it ends: tests and private runs leave no
``/tmp/ray/session_*`` folders behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from oam_actors.cluster import RaySystem, private_ray

pytestmark = pytest.mark.slow


def session_folder() -> Path:
    return Path(ray._private.worker._global_node.get_session_dir_path())  # where this instance writes


async def test_a_ray_system_that_started_ray_removes_its_session_folder() -> None:
    async with RaySystem(shards=1):
        session = session_folder()
        assert session.is_dir() and Path("/tmp/ray") not in session.parents
    assert not ray.is_initialized()
    assert not session.exists() and not session.parent.exists()


def test_private_ray_removes_its_session_folder() -> None:
    with private_ray():
        session = session_folder()
        assert session.is_dir()
    assert not session.parent.exists()


def test_one_private_instance_after_another_leaves_nothing_of_the_first() -> None:
    """Ray writes into the ``_system_config`` it is given (its object spilling folder): the next
    instance of the same process must not write into the first one's removed folder."""
    with private_ray():
        first = session_folder()
    with private_ray():
        assert not first.parent.exists()
    assert not first.parent.exists()
