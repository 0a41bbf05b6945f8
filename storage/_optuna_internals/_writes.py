"""Writes to Optuna's tables made here rather than through ``RDBStorage``: a trial's params, user
attributes and final state, each in one transaction where Optuna takes several.

They check what Optuna's methods check and leave the rows Optuna's would (``tests/storage/``).
"""

from __future__ import annotations

import datetime
import json
import math
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import sqlalchemy
from sqlalchemy.engine import Connection, Engine

from storage._optuna_internals._access import rdb_models, scoped_session
from storage._optuna_internals._steps import UPSERTS, check_running, insert_into, on_conflict_update, store_steps

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from optuna.distributions import BaseDistribution
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial, TrialState


_STUDY_DISTRIBUTIONS: weakref.WeakKeyDictionary[Any, dict[tuple[int, str], BaseDistribution]] = (
    weakref.WeakKeyDictionary()
)
"""Per storage, a distribution already stored for each (study, param): what every later one of that
param must be compatible with (all stored ones are, with each other), so it is looked up once."""


def set_trial_params(storage: RDBStorage, trial_id: int, params: Sequence[tuple[str, float, BaseDistribution]]) -> None:
    """Store several params of a trial (name, internal value, distribution) in one transaction.

    Optuna commits each suggested param alone, and looks up the trial and an earlier distribution
    of the param each time; a trial's params are all chosen before it trains, so they are written
    together: the same checks (the trial is running, each distribution agrees with the study's
    earlier ones, looked up once per worker and param), all or none stored.
    """
    from optuna import distributions

    models = rdb_models()
    if not params:
        return
    known = _STUDY_DISTRIBUTIONS.setdefault(storage, {})
    with scoped_session(storage, True) as session:
        trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
        storage.check_trial_is_updatable(trial_id, trial.state)  # type: ignore[arg-type]  # ORM column
        study_id = int(trial.study_id)
        for name, value, distribution in params:
            previous = known.get((study_id, name))
            if previous is None:
                record = (
                    session.query(models.TrialParamModel.distribution_json)
                    .join(models.TrialModel)
                    .filter(models.TrialModel.study_id == study_id, models.TrialParamModel.param_name == name)
                    .first()
                )
                if record is not None:
                    previous = known[(study_id, name)] = distributions.json_to_distribution(record[0])
            if previous is not None:
                distributions.check_distribution_compatibility(previous, distribution)
            session.add(
                models.TrialParamModel(
                    trial_id=trial_id,
                    param_name=name,
                    param_value=value,
                    distribution_json=distributions.distribution_to_json(distribution),
                )
            )


def set_user_attrs(storage: RDBStorage, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """Set several user attributes of a trial in one transaction (Optuna commits each one alone).

    A trial's attributes are written at its start and end, on the orchestration path that every
    trial pays for: on PostgreSQL and SQLite, one look at the trial (which must not be finished)
    and one multi-row upsert, instead of two statements and a commit per attribute. Safe to repeat.
    """
    if not attrs:
        return
    with scoped_session(storage, True) as session:
        if storage.engine.name in UPSERTS:
            check_running(storage, session, trial_id)
        _write_attrs(storage, session, trial_id, attrs)


def _write_attrs(storage: RDBStorage, session: Any, trial_id: int, attrs: Mapping[str, Any],
                 system: bool = False) -> None:  # fmt: skip
    """The user (or ``system``) attributes, upserted in one statement where the database can (the
    caller has checked that the trial runs); elsewhere one by one, as Optuna does, each checking."""
    models = rdb_models()
    table = models.TrialSystemAttributeModel if system else models.TrialUserAttributeModel
    if storage.engine.name not in UPSERTS:
        for key, value in attrs.items():
            storage._set_trial_attr_without_commit(session, table, trial_id, key, value)
    elif attrs:
        rows = [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()]
        insert = insert_into(storage.engine.name, table).values(rows)
        session.execute(on_conflict_update(insert, [table.trial_id, table.key], ["value_json"]))


def finish_trial(
    storage: RDBStorage,
    trial_id: int,
    state: TrialState,
    value: float | Sequence[float] | None,
    attrs: Mapping[str, Any],
    before_write: Callable[[FrozenTrial, list[float] | None], None],
    steps: Mapping[int, float] | None = None,
    system_attrs: Mapping[str, Any] | None = None,
) -> FrozenTrial | None:
    """Optuna's ``tell`` of a running trial, with its final user attributes and its last reported
    values not stored yet (``steps``: step -> value), in one transaction.

    Optuna's takes four (the trial read before and after, the write, and the attributes alone).
    The trial's row is locked and read; if it is already finished (by another process, or by this
    very call whose reply was lost) it is returned as found and nothing is written. Otherwise
    ``steps`` are stored, and then, as ``tell`` does: a pruned trial's value is its last reported
    one (when a number), the sampler's hook ``before_write(trial, values)`` runs (the state is
    written even if it raises), and the attributes, values, state and completion time are written
    together. ``value`` is one number, or a list, one for each objective of a multi-objective study;
    ``system_attrs`` are written with the rest (a constrained study's ``constraints:<name>`` values,
    which Optuna's samplers read: :func:`constraint_key`).

    Raises:
        ValueError: a COMPLETE trial told no value, or NaN.
    """
    from optuna.trial import TrialState

    models = rdb_models()
    with scoped_session(storage, True) as session:
        row = models.TrialModel.find_or_raise_by_id(trial_id, session, for_update=True)
        frozen = storage._build_frozen_trial_from_trial_model(row)
        if frozen.state.is_finished():
            return frozen
        if steps:
            store_steps(storage, session, trial_id, steps)
            frozen.intermediate_values = {**frozen.intermediate_values, **steps}
        told = [value] if isinstance(value, int | float) else value  # one value, or one per objective
        values = None if told is None else [float(v) for v in told]
        if state == TrialState.COMPLETE and (not values or any(math.isnan(v) for v in values)):
            raise ValueError(f"trial {frozen.number} cannot complete with the value {value!r}")
        if state == TrialState.PRUNED and frozen.last_step is not None:
            last = frozen.intermediate_values[frozen.last_step]
            values = None if math.isnan(last) else [last]
        failure: Exception | None = None
        frozen.system_attrs.update(system_attrs or {})  # as the sampler would find the trial once told
        try:
            before_write(frozen, values)
        except Exception as exc:  # noqa: BLE001 - raised once the state is written, as tell does
            failure = exc
        _write_attrs(storage, session, trial_id, attrs)
        if system_attrs:
            _write_attrs(storage, session, trial_id, system_attrs, system=True)
        for objective, item in enumerate(values or []):
            storage._set_trial_value_without_commit(session, row, objective, item)
        row.state = state
        row.datetime_complete = datetime.datetime.now()
    if failure is not None:
        raise failure
    return None


_EVICT = sqlalchemy.text("UPDATE trial_user_attributes SET key = :to WHERE key = :key AND trial_id IN :ids")
_EVICT = _EVICT.bindparams(sqlalchemy.bindparam("ids", expanding=True))


def evict_paused(bind: Engine | Connection, trial_ids: Iterable[int], key: str, to: str) -> None:
    """Make paused attempts plain pruned ones (their checkpoints are about to go): their attribute
    ``key`` becomes ``to``, same value, in one statement. On a lock's connection (``study_lock``) it
    commits with the lock's release, only if the lock was held throughout."""
    ids = list(trial_ids)
    if not ids:
        return
    if isinstance(bind, Engine):
        with bind.begin() as conn:
            evict_paused(conn, ids, key, to)
        return
    bind.execute(_EVICT, {"ids": ids, "key": key, "to": to})
