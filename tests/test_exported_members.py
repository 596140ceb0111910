"""The public face: ``oam_actors.__all__`` is exactly what the package exports, each name once."""

from __future__ import annotations

import oam_actors


def test_every_exported_name_resolves() -> None:
    missing = [name for name in oam_actors.__all__ if not hasattr(oam_actors, name)]
    assert missing == []


def test_names_are_listed_once_in_order() -> None:
    names = [name for name in oam_actors.__all__ if name != "__version__"]
    assert names == sorted(set(names), key=names.index)
    assert len(names) == len(set(names))
    assert names == sorted(names)


def test_public_classes_come_from_the_package() -> None:
    for name in oam_actors.__all__:
        value = getattr(oam_actors, name)
        if isinstance(value, type):
            assert value.__module__.startswith("oam_actors."), name
