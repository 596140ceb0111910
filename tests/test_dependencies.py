"""Every third-party import is a declared dependency, so a fresh virtualenv that installs only what
``pyproject.toml`` declares can import everything: the package's modules need the base
dependencies, the test suite's need the base ones plus the ``test`` extra.

Imports are read with ``ast`` (module level and inside functions, so lazy imports count too) and
mapped to the distribution that provides them in this environment. A module that arrived only as
some other package's dependency (``h11`` under ``httpx``, ``yaml`` under ``ray``) fails here until
it is declared. Out of scope: ``scripts/local_model.py`` installs its own pinned ``xllamacpp``, and
``benchmarks/`` import the ``openai`` SDK only when it is there.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "oam_actors"
TESTS = REPO / "tests"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: Iterable[str]) -> set[str]:
    # "ray>=2.9", "httpx[http2]>=0.27 ; python_version>'3'": the name is the leading token.
    return {_canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group()) for requirement in requirements}


def _declared(*extras: str) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = _requirement_names(project["dependencies"])
    for extra in extras:
        names |= _requirement_names(project["optional-dependencies"][extra])
    return names


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """Top-level module names of every absolute import in ``path``, with their line."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.partition(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.partition(".")[0], node.lineno


_providers = functools.cache(importlib.metadata.packages_distributions)  # reads every installed package


def _undeclared(files: Iterable[Path], declared: set[str], local: set[str]) -> list[str]:
    providers = _providers()
    problems = []
    for path in sorted(files):
        for module, line in _imports(path):
            if module in sys.stdlib_module_names or module in local or module == "__future__":
                continue
            where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{line} imports {module}"
            distributions = providers.get(module)
            if not distributions:
                problems.append(f"{where}, which no installed distribution provides")
            elif not declared & {_canonical(name) for name in distributions}:
                problems.append(f"{where} (from {', '.join(sorted(set(distributions)))}), not declared")
    return problems


def test_the_package_imports_only_base_dependencies() -> None:
    problems = _undeclared(PACKAGE.rglob("*.py"), _declared(), {"oam_actors"})
    assert not problems, "undeclared in [project] dependencies:\n" + "\n".join(problems)


def test_the_tests_import_only_base_and_test_dependencies() -> None:
    local = {"oam_actors"} | {path.stem for path in TESTS.rglob("*.py")}  # helpers beside the tests
    problems = _undeclared(TESTS.rglob("*.py"), _declared("test"), local)
    assert not problems, "undeclared in dependencies or the test extra:\n" + "\n".join(problems)


@pytest.mark.parametrize("source", ["import h11\n", "def f():\n    from yaml import safe_load\n"])
def test_an_undeclared_import_is_found(tmp_path: Path, source: str) -> None:
    # The check itself can fail: a module importing what nothing declares is reported.
    module = tmp_path / "probe.py"
    module.write_text(source)
    problems = _undeclared([module], {"msgspec"}, {"oam_actors"})
    assert len(problems) == 1 and "not declared" in problems[0]
