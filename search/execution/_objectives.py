"""A finished trial's values for the study's objectives, and its constraints and feasibility
(``search/settings/_objectives.py``), from what it measured."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from search.coordination import retrying, stop_for_objective_error
from search.settings import FEASIBLE_ATTR, constraint_values, missing_metrics, objective_values, unknown_metric_message
from storage import constraint_key

if TYPE_CHECKING:
    from search.execution._context import WorkerContext


class ObjectiveMetricError(Exception):
    """An objective or constraint names a metric the trial did not record: the trial fails, and the
    study takes no new trial (every one would fail the same way)."""


def scored(ctx: WorkerContext, number: int, final: Mapping[str, float], best: float | None,
           pruned: bool) -> tuple[float | list[float] | None, dict[str, Any], dict[str, float]]:  # fmt: skip
    """The value to tell (a list for several objectives; None for a pruned trial), the user attributes
    to add (``feasible``) and the system attributes (Optuna's ``constraints:<label>``).

    ``best``: the best epoch's value of the study's per-epoch metric (None when pruned).

    Raises:
        ObjectiveMetricError: a complete trial lacks a metric an objective or constraint names
            (the study is stopped first, with the reason stored for ``search start`` to report).
    """
    record = ctx.record
    goals, limits = record.goals(), record.limits()
    missing = missing_metrics([*(o.metric for o in goals), *(c.metric for c in limits)], final, record.metric)
    if missing and not pruned:
        reason = unknown_metric_message(missing, final, number)
        retrying(lambda: stop_for_objective_error(ctx.coordinator, reason), "stopping the study")
        raise ObjectiveMetricError(reason)
    value: float | list[float] | None = None  # a pruned trial's: its last reported epoch's (Optuna's rule)
    if best is not None:
        values = objective_values(goals, final, record.metric, best)
        value = values[0] if len(values) == 1 else values
    # A pruned trial's constraints from its last epoch, where it measured them.
    basis = best if best is not None else final.get(record.metric, math.nan)
    cons = {} if missing else constraint_values(limits, final, record.metric, basis)
    if not cons or any(math.isnan(v) for v in cons.values()):
        return value, {}, {}
    return value, {FEASIBLE_ATTR: all(v <= 0 for v in cons.values())}, _system(cons)


def _system(cons: Mapping[str, float]) -> dict[str, float]:
    return {constraint_key(label): value for label, value in cons.items()}
