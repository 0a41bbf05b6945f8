"""A running trial's reported values (Optuna's intermediate values), stored by prebuilt statements.

Workers store them at every batch of epochs and read their study's changes at every pruner
decision: the statements are built once per dialect, bound to each trial's values when run, where
building them anew (as SQLAlchemy's ORM and Optuna's storage do) cost several times the query.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna.storages import RDBStorage

UPSERTS = ("postgresql", "sqlite")
"""The dialects written with upserts; elsewhere Optuna's own statements."""


def store_steps(storage: RDBStorage, session: Any, trial_id: int, steps: Mapping[int, float]) -> None:
    """Store a trial's values (step -> value) in ``session``'s transaction, as Optuna's ``report``
    does (the trial must be running; a step stored before is overwritten). On PostgreSQL and SQLite
    one statement a value, an upsert of the row selected from the trial while it runs, where Optuna
    looks the trial and the step up first; only when nothing was written is the trial looked at, to
    raise Optuna's error."""
    from optuna.storages._rdb import models

    if storage.engine.name not in UPSERTS:
        for step, value in steps.items():
            storage._set_trial_intermediate_value_without_commit(session, trial_id, step, value)
        return
    statement, conn = _upsert_step(storage.engine.name), session.connection()
    for step, value in steps.items():
        stored, kind = models.TrialIntermediateValueModel.intermediate_value_to_stored_repr(value)
        if conn.execute(statement, {"t": trial_id, "s": step, "v": stored, "k": kind}).rowcount == 0:
            check_running(storage, session, trial_id)  # not running (or no such trial): Optuna's error
            raise RuntimeError(f"the value of trial id {trial_id} at step {step} was not stored")


def check_running(storage: RDBStorage, session: Any, trial_id: int) -> None:
    """Raise Optuna's error unless the trial exists and runs."""
    from optuna.storages._rdb import models

    trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
    storage.check_trial_is_updatable(trial_id, trial.state)  # type: ignore[arg-type]  # ORM column


@functools.cache
def _upsert_step(dialect: str) -> Any:
    from optuna.storages._rdb import models
    from optuna.trial import TrialState
    from sqlalchemy import bindparam, select

    table, trials = models.TrialIntermediateValueModel.__table__, models.TrialModel.__table__
    trial_id = bindparam("t", type_=table.c.trial_id.type)
    row = select(
        trial_id,
        bindparam("s", type_=table.c.step.type),
        bindparam("v", type_=table.c.intermediate_value.type),
        bindparam("k", type_=table.c.intermediate_value_type.type),
    ).where(trials.c.trial_id == trial_id, trials.c.state == TrialState.RUNNING)
    columns = ["trial_id", "step", "intermediate_value", "intermediate_value_type"]
    insert = insert_into(dialect, table).from_select(columns, row)
    return on_conflict_update(insert, [table.c.trial_id, table.c.step], columns[2:])


def insert_into(dialect: str, table: Any) -> Any:
    """An INSERT into ``table`` in ``dialect``, one of ``UPSERTS``."""
    from sqlalchemy.dialects import postgresql, sqlite

    return (postgresql if dialect == "postgresql" else sqlite).insert(table)


def on_conflict_update(insert: Any, keys: list[Any], columns: list[str]) -> Any:
    """``insert``, which sets ``columns`` of the row with the same ``keys`` where there is one."""
    return insert.on_conflict_do_update(
        index_elements=keys, set_={column: insert.excluded[column] for column in columns}
    )


@functools.cache
def system_attrs_query() -> Any:
    """A trial's (``trial``) system attributes: keys and JSON values."""
    from optuna.storages._rdb import models
    from sqlalchemy import bindparam, select

    table = models.TrialSystemAttributeModel.__table__
    return select(table.c.key, table.c.value_json).where(table.c.trial_id == bindparam("trial"))


@functools.cache
def trial_changes_query() -> Any:
    """The ids, numbers and states of a study's (``study``) trials numbered from ``count`` on or among
    ``ids`` (a list, expanded when run)."""
    from optuna.storages._rdb import models
    from sqlalchemy import bindparam, or_, select

    table = models.TrialModel.__table__
    return select(table.c.trial_id, table.c.number, table.c.state).where(
        table.c.study_id == bindparam("study"),
        or_(table.c.number >= bindparam("count"), table.c.trial_id.in_(bindparam("ids", expanding=True))),
    )
