"""Optuna's internals are reached from one package, ``storage._optuna_internals``, and nowhere else.

Read from the source with ``ast``: outside that package no module imports a private Optuna module
or name, reads or writes an attribute that Optuna names privately (collected from the installed
Optuna's own source), defines a method of Optuna's private names (but the hooks listed below), or
writes to Optuna's tables (SQL text, or SQLAlchemy's insert/update/delete or ``session.add`` of
Optuna's table models). So an Optuna upgrade is a read of one package, not a hunt through the tree.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("search", "storage", "studies", "trainer", "benchmarks")
INTERNALS = ROOT / "storage" / "_optuna_internals"
OPTUNA = Path(optuna.__file__).parent

HOOKS = {
    "search/settings/_pruners.py": {"_get_bracket_id", "_create_bracket_study"},
    "search/execution/_pruning.py": {"_get_trials"},
}
"""Private methods of Optuna's that Optuna calls on our objects (a Hyperband subclass; a stand-in for a
study a pruner reads): re-read them against each new Optuna, with the internals package."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


@functools.cache
def optuna_private_names() -> frozenset[str]:
    """Every private name Optuna's source defines: functions, classes, module names and attributes it sets."""
    names: set[str] = set()
    for path in OPTUNA.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            names.update(t.id for t in targets if isinstance(t, ast.Name) and _private(t.id))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and _private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
    return frozenset(names)


@functools.cache
def optuna_tables() -> tuple[frozenset[str], frozenset[str]]:
    """Optuna's table names (and Alembic's, which versions them) and its table models' class names."""
    tree = ast.parse((OPTUNA / "storages" / "_rdb" / "models.py").read_text(encoding="utf-8"))
    tables, models = {"alembic_version"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name.endswith("Model"):
            models.add(node.name)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__tablename__" for t in node.targets):
            tables.add(node.value.value)  # type: ignore[attr-defined]
    return frozenset(tables), frozenset(models)


def _sql_write(tables: frozenset[str]) -> re.Pattern[str]:
    names = "|".join(sorted(tables, key=len, reverse=True))
    return re.compile(rf"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+[\"`]?({names})\b", re.IGNORECASE)


def _optuna_bound(tree: ast.Module) -> set[str]:
    """Names that an import in the module binds to something of Optuna's."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "optuna")
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "optuna":
            bound.update(a.asname or a.name for a in node.names)
    return bound


def _root(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _optuna_classes(tree: ast.Module) -> set[ast.ClassDef]:
    """The module's classes that derive from one of Optuna's (directly or through another of them)."""
    derived: set[ast.ClassDef] = set()
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    bound = _optuna_bound(tree)
    while True:
        names = bound | {c.name for c in derived}
        more = {c for c in classes if c not in derived and any(_root(b) in names for b in c.bases)}
        if not more:
            return derived
        derived |= more


def violations(source: str, where: str) -> list[str]:
    """What in ``source`` (a module at ``where``, relative to the repository) reaches into Optuna."""
    tree = ast.parse(source, where)
    private, (tables, models) = optuna_private_names(), optuna_tables()
    sql, derived, found = _sql_write(tables), _optuna_classes(tree), []

    def visit(node: ast.AST, cls: ast.ClassDef | None) -> None:
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found.extend(f"{line}: import {a.name}" for a in node.names
                         if a.name.split(".")[0] == "optuna" and any(map(_private, a.name.split("."))))  # fmt: skip
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "optuna":
            if any(map(_private, node.module.split("."))) or any(_private(a.name) for a in node.names):  # type: ignore[union-attr]
                found.append(f"{line}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute) and node.attr in private:
            own = isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}
            if not own or cls is None or cls in derived:
                found.append(f"{line}: {ast.unparse(node)}")
        elif isinstance(node, ast.FunctionDef) and cls is not None and node.name in private:
            if node.name not in HOOKS.get(where, ()):
                found.append(f"{line}: def {cls.name}.{node.name} (a private method of Optuna's)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and sql.search(node.value):
            found.append(f"{line}: SQL writing to Optuna's table {sql.search(node.value)[2]!r}")  # type: ignore[index]
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = " ".join(ast.unparse(a) for a in [*node.args, *(k.value for k in node.keywords)])
            touched = {m for m in models if re.search(rf"\b{m}\b", args)}
            if name in {"insert", "update", "delete", "add", "add_all", "merge", "bulk_save_objects"} and touched:
                found.append(f"{line}: {name}(...) of Optuna's {', '.join(sorted(touched))}")
            if name in {"getattr", "setattr", "hasattr", "delattr"} and len(node.args) > 1:
                key = node.args[1]
                if isinstance(key, ast.Constant) and key.value in private:
                    found.append(f"{line}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, node if isinstance(node, ast.ClassDef) else cls)

    visit(tree, None)
    return found


def _checked_modules() -> list[Path]:
    return [p for pkg in CHECKED for p in sorted((ROOT / pkg).rglob("*.py")) if INTERNALS not in p.parents]


def test_the_collected_names_are_optunas_private_ones() -> None:
    private, (tables, models) = optuna_private_names(), optuna_tables()
    assert {"_trial_id", "_study_id", "_storage", "_cached_frozen_trial", "_VersionManager",
            "_create_scoped_session", "_filter_study", "_n_warmup_steps"} <= private  # fmt: skip
    assert {"trials", "studies", "trial_values", "trial_heartbeats", "version_info", "alembic_version"} <= tables
    assert {"TrialModel", "TrialParamModel", "TrialUserAttributeModel"} <= models


def test_the_checker_finds_each_kind_of_reach() -> None:
    source = """
import optuna.storages._rdb.models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.pruners import _filter_study
from optuna.pruners import HyperbandPruner
import sqlalchemy

def f(trial, study, session, models):
    trial._trial_id
    study._storage = None
    getattr(study, "_thread_local")
    sqlalchemy.text("UPDATE trials SET state = 'FAIL'")
    sqlalchemy.text("insert into trial_params (trial_id) values (1)")
    sqlalchemy.insert(models.TrialModel)
    session.add(models.TrialParamModel(trial_id=1))

class Ours:
    def __init__(self):
        self._storage = None  # ours: allowed

class Hb(HyperbandPruner):
    def n(self):
        return self._n_brackets

    def _get_bracket_id(self, study, trial):
        return 0
"""
    found = violations(source, "search/x.py")
    assert len(found) == 12, "\n".join(found)
    assert not any("self._storage" in f for f in found)


def test_no_module_outside_the_internals_package_reaches_into_optuna() -> None:
    found = [v for path in _checked_modules() for v in violations(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == [], "Optuna's internals are reached from storage/_optuna_internals/ only:\n" + "\n".join(found)


def test_the_listed_hooks_are_still_overridden_there() -> None:
    """A hook that left its module leaves this list too, so that it never allows more than it needs."""
    for where, names in HOOKS.items():
        tree = ast.parse((ROOT / where).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert names <= defined, where
