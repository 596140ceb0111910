"""DESIGN.md's layers, checked over the whole package from its modules' own imports.

Every ``import`` and ``from … import`` in every module counts, at any depth (inside functions,
under ``TYPE_CHECKING``), relative ones resolved to absolute names. A module may import its own
layer, the standard library, third-party packages, and the layers its rule in :data:`RULES`
lists; nothing else. A layer is a subpackage or a top-level module of ``oam_actors``. Within a
layer, no modules import each other in a circle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

import oam_actors

PACKAGE = "oam_actors"
SOURCE = Path(oam_actors.__file__).parent

# What each layer may import besides itself, and why (DESIGN.md, "Layers": transports → bridge →
# objects → game → agent; models implement agent's LanguageModel; objects and the ModelActor use
# runtime; runtime knows no protocol; nothing imports upward; only the CLI exits the process).
_LEAVES = ("clock", "addresses", "observability", "_version")
_BELOW_BRIDGE = frozenset({"objects", "game", "agent", "models", "runtime", "observability", "errors", "addresses",
                           "clock", "_version"})
RULES: dict[str, tuple[frozenset[str], str]] = {
    **{leaf: (frozenset(), "a leaf: imports nothing of the package") for leaf in _LEAVES},
    "errors": (frozenset({"clock"}), "the error tree spells instants with the clock module only"),
    "runtime": (frozenset(), "runtime knows no protocol: it imports nothing of the package"),
    "agent": (frozenset({"errors", "addresses"}), "agent knows no actor, no bridge, no backend"),
    "game": (frozenset({"agent", "errors", "addresses"}), "game → agent: pure, no actors, no backends"),
    "models": (
        frozenset({"agent", "runtime", "observability", "errors", "addresses"}),
        "models implement agent's LanguageModel; the ModelActor uses runtime",
    ),
    "cluster": (
        frozenset({"runtime", "agent", "models", "errors", "addresses"}),
        "cluster is a runtime that hosts model actors: runtime, agent, models, errors",
    ),
    "objects": (
        frozenset({"game", "agent", "models", "runtime", "errors", "addresses"}),
        "objects → game → agent; object actors use runtime",
    ),
    "bridge": (_BELOW_BRIDGE, "bridge → objects and below"),
    "game_methods": (_BELOW_BRIDGE | {"bridge"}, "the game's methods are a bridge extension"),
    "transports": (_BELOW_BRIDGE | {"bridge", "game_methods"}, "transports → bridge and below"),
    "client": (frozenset({"errors"}), "the client speaks the wire protocol only, like any other client"),
    "sim": (
        _BELOW_BRIDGE | {"bridge", "game_methods", "cluster", "client"},
        "sim drives bridges as a client does, on either runtime; never the CLI",
    ),
    "__main__": (frozenset({"cli"}), "python -m oam_actors runs the CLI"),
}
# Time is injected everywhere (DESIGN: a clock tests advance), so every non-leaf layer may use it.
RULES.update({layer: (allowed | {"clock"}, rule) for layer, (allowed, rule) in RULES.items()
              if layer not in _LEAVES and layer != "__main__"})
RULES["cli"] = (frozenset(RULES) - {"__main__"} | {PACKAGE}, "the CLI wires every layer")
RULES[PACKAGE] = (
    frozenset(RULES) - {"cli", "__main__"},
    "the package root re-exports the public API: no CLI, and nothing below imports it",
)

class Violation(NamedTuple):
    module: str
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.module} → {self.imported} ({self.rule})"


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (packages by their ``__init__``)."""
    modules = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(SOURCE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imports(module: str, path: Path) -> Iterator[str]:
    """The absolute names of the package's modules that ``module`` imports."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # ``from pkg import name`` imports the module pkg.name if there is one, else pkg.
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def violations() -> list[Violation]:
    found = []
    for module, path in MODULES.items():
        layer = layer_of(module)
        allowed, rule = RULES[layer]
        for imported in sorted(set(_imports(module, path))):
            if imported.split(".")[0] != PACKAGE:
                continue
            target = layer_of(imported)
            if target != layer and target not in allowed:
                found.append(Violation(module, imported, rule))
    return found


def test_every_layer_has_a_rule() -> None:
    assert {layer_of(module) for module in MODULES} <= set(RULES)


def test_imports_follow_the_layers() -> None:
    found = violations()
    assert not found, "imports against DESIGN.md's layers:\n" + "\n".join(map(str, found))


def test_the_check_sees_imports_at_any_depth_and_resolves_relative_ones(tmp_path: Path) -> None:
    """The resolver on a module written for the purpose, read as ``oam_actors.sim.probe``."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "import oam_actors.runtime\n"
        "from .. import bridge, __version__\n"
        "from ..agent import Agent\n"
        "from . import driver\n"
        "if TYPE_CHECKING:\n"
        "    from ..cli import models\n"
        "def later() -> None:\n"
        "    from ..errors import ErrorCode\n"
    )
    assert sorted(_imports("oam_actors.sim.probe", probe)) == [
        "oam_actors",  # __version__ is a name in the package root, not a module
        "oam_actors.agent",
        "oam_actors.bridge",
        "oam_actors.cli.models",
        "oam_actors.errors",
        "oam_actors.runtime",
        "oam_actors.sim.driver",
        "typing",
    ]


def test_a_violation_names_the_module_the_import_and_the_rule() -> None:
    rule = RULES["runtime"][1]
    assert str(Violation("oam_actors.runtime._cell", "oam_actors.objects", rule)) == (
        "oam_actors.runtime._cell → oam_actors.objects (runtime knows no protocol: it imports nothing of the package)"
    )


def test_importing_the_package_does_not_import_ray() -> None:
    """Ray loads only with oam_actors.cluster: every other module imports without it."""
    names = [name for name in MODULES if layer_of(name) not in ("cluster", "__main__")]
    code = f"import importlib, sys\nfor name in {names!r}: importlib.import_module(name)\nprint('ray' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def circles() -> list[list[str]]:
    """Groups of modules that import each other in a circle, directly or through others. A
    package's ``__init__`` (a facade re-exporting its modules) is left out: the circles that
    matter run between the modules that hold the code (STYLE: untie them)."""
    packages = {module for module, path in MODULES.items() if path.name == "__init__.py"}
    edges = {module: sorted({imported for imported in _imports(module, path)
                             if imported in MODULES and imported not in packages and imported != module})
             for module, path in MODULES.items() if module not in packages}
    # Tarjan's strongly connected components, iteratively (deep import chains).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def test_no_module_imports_itself_in_a_circle() -> None:
    found = circles()
    assert not found, "import circles (untie them, STYLE.md):\n" + "\n".join(" <-> ".join(group) for group in found)
