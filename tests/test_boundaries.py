"""The shape of the code: who may import whom, no import cycles, modules a reader can hold in mind.

The import graph is read from the source (every ``import``, at module level, inside functions and
under ``TYPE_CHECKING`` alike), so a lazy import cannot hide a cycle or a backwards dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("search", "trainer", "studies", "storage")
MAX_MODULE_LINES = 320
"""About 300: past that a module is doing more than one job."""

# search's subpackages and what each may import (besides trainer, studies and storage).
# commands -> api -> execution -> tracking -> coordination -> settings; observation only reads.
SEARCH_LAYERS = {
    "search.exceptions": set(),
    "search.settings": {"search.exceptions"},
    "search.coordination": {"search.exceptions", "search.settings"},
    "search.tracking": {"search.exceptions", "search.settings", "search.coordination"},
    "search.execution": {"search.exceptions", "search.settings", "search.coordination", "search.tracking"},
    "search.observation": {"search.exceptions", "search.settings", "search.coordination", "search.tracking"},
    "search.api": {"search.exceptions", "search.settings", "search.coordination", "search.tracking",
                   "search.execution", "search.observation"},
    "search.cli": {"search", "search.api", "search.exceptions", "search.settings", "search.coordination",
                   "search.tracking", "search.execution", "search.observation"},
}  # fmt: skip
TOP_LEVEL = {
    "trainer": set(),
    "storage": set(),
    "studies": {"trainer"},
    "search": {"trainer", "studies", "storage"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Project modules that ``name`` imports, wherever the import statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            # ``from pkg import mod`` imports the submodule; ``from pkg import name`` imports pkg.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # ``import a.b.c`` of a non-module attribute
                target = target.rpartition(".")[0]
            if target:
                yield target


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: set(_imports(name, path, known)) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _layer(module: str) -> str:
    for layer in sorted(SEARCH_LAYERS, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return module


def test_the_walker_sees_lazy_and_type_checking_imports() -> None:
    graph = _graph()
    # A function-level import and a TYPE_CHECKING one, both real in the code today.
    assert "search.tracking" in graph["search.cli._commands"]
    assert "search.coordination._coordinator" in graph["search.coordination._liveness"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}, "e": {"a"}}) == [["a", "b", "c"], ["d"]]


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_top_level_packages_depend_one_way() -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if (src := module.split(".")[0]) != (dst := target.split(".")[0]) and dst not in TOP_LEVEL[src]
    )
    assert wrong == []


def test_search_subpackages_depend_one_way() -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if module.startswith("search")
        for target in targets
        if target.startswith("search")
        and (src := _layer(module)) != (dst := _layer(target))
        and src in SEARCH_LAYERS
        and dst not in SEARCH_LAYERS[src]
    )
    assert wrong == []


def test_every_search_module_belongs_to_a_subpackage() -> None:
    loose = [m for m in _modules() if m.startswith("search.") and _layer(m) == m and m not in SEARCH_LAYERS]
    assert loose == ["search.__main__"]


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_stay_small(package: str) -> None:
    long = {name: n for name, path in _modules().items() if name.split(".")[0] == package
            and (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}  # fmt: skip
    assert long == {}


def test_test_modules_stay_small() -> None:
    """The cap holds for the tests too: a test module past it tests more than one thing."""
    long = {str(path.relative_to(ROOT)): n for path in sorted((ROOT / "tests").rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}  # fmt: skip
    assert long == {}


def test_search_tests_are_shaped_like_the_search_package() -> None:
    """tests/search/<subpackage>/ holds the tests of that subpackage (e2e/ those of the whole), and
    tests/search itself only what they share: a test module at its top would belong nowhere."""
    here = ROOT / "tests" / "search"
    assert sorted(path.name for path in here.glob("test_*.py")) == []
    folders = {path.parent.name for path in here.glob("*/test_*.py")}
    subpackages = {layer.removeprefix("search.") for layer in SEARCH_LAYERS if layer != "search.exceptions"}
    assert folders - subpackages == {"e2e"}


def test_import_trainer_leaves_optuna_and_mlflow_out() -> None:
    code = (
        "import sys, trainer\n"
        "leaked = sorted(m for m in sys.modules if m.split('.')[0] in {'optuna', 'mlflow'})\n"
        "print(','.join(leaked))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_import_trainer_leaves_fsdp_and_distributed_checkpointing_out() -> None:
    """They are about 0.8 s of imports that only a sharded fit needs; the command that follows a
    study imports the trainer with any study and never trains (sharding itself: test_multiprocess)."""
    heavy = ("torch.distributed.fsdp", "torch.distributed.checkpoint", "torch.distributed.tensor")
    code = f"import sys, trainer\nprint(','.join(m for m in {heavy!r} if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
