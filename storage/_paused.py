"""Paused trials (freeze-thaw) and the values a resumption is chosen from, straight from Optuna's tables.

A paused trial is a PRUNED attempt with a ``paused_at`` user attribute and no attempt continuing it
(a resumption lists it last in its ``retry_history``, as a retry does). Read under the study lock
when a worker asks for work, so each is one round trip, and the values are read only at the rungs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

import sqlalchemy
from sqlalchemy.engine import Connection, Engine

from storage._liveness import retried_trial_numbers

_PAUSED = sqlalchemy.text(
    """
    SELECT t.trial_id, t.number, a.value_json AS at, f.value_json AS logical
    FROM trials t
    JOIN trial_user_attributes a ON a.trial_id = t.trial_id AND a.key = :key
    LEFT JOIN trial_system_attributes f ON f.trial_id = t.trial_id AND f.key = 'failed_trial'
    WHERE t.study_id = :sid AND t.state = 'PRUNED'
    """
)

_AT_STEPS = sqlalchemy.text(
    """
    SELECT t.number, f.value_json AS logical, v.step, v.intermediate_value AS value
    FROM trials t
    JOIN trial_intermediate_values v ON v.trial_id = t.trial_id
    LEFT JOIN trial_system_attributes f ON f.trial_id = t.trial_id AND f.key = 'failed_trial'
    WHERE t.study_id = :sid AND t.state IN ('COMPLETE', 'PRUNED', 'RUNNING') AND v.step IN :steps
    """
).bindparams(sqlalchemy.bindparam("steps", expanding=True))


def paused_trials(bind: Engine | Connection, study_id: int, key: str) -> dict[int, tuple[int, int]]:
    """Logical trial number -> (trial id, epoch) of each paused trial (``key``: the attribute that
    names its epoch) that no attempt continues yet."""
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return paused_trials(conn, study_id, key)
    rows = bind.execute(_PAUSED, {"sid": study_id, "key": key}).fetchall()
    if not rows:
        return {}
    continued = retried_trial_numbers(bind, study_id)
    return {
        int(json.loads(r.logical)) if r.logical is not None else int(r.number): (int(r.trial_id), int(json.loads(r.at)))
        for r in rows
        if int(r.number) not in continued
    }


def values_at(bind: Engine | Connection, study_id: int, steps: Iterable[int]) -> dict[int, dict[int, float]]:
    """Logical trial number -> {step: value} at ``steps``, over complete, pruned and running attempts
    (NaN where a value is not finite: it ranks nowhere)."""
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return values_at(conn, study_id, steps)
    out: dict[int, dict[int, float]] = {}
    for r in bind.execute(_AT_STEPS, {"sid": study_id, "steps": list(steps)}):
        number = int(json.loads(r.logical)) if r.logical is not None else int(r.number)
        out.setdefault(number, {})[int(r.step)] = math.nan if r.value is None else float(r.value)
    return out
