"""What a study optimises: its objectives (``--objective METRIC:min|max``), its constraints
(``--constraint "latency_ms<=2"``), and the values a finished trial gets for each from its final metrics.

An objective or constraint names a metric of the trial's ``final_metrics`` (the last epoch's model
metrics, and whatever else a trial records there at its end). The study's own per-epoch metric (the
one reported to the pruner, ``val_loss``) is the exception: its value is the best epoch's, as a
trial's single value always was. The pruner prunes on that per-epoch curve, so it runs only while
the objective is that metric in the study's direction (:func:`prunes`); any other choice of
objectives searches with ``--pruner none``, and trials end early by ``--patience`` on that curve only.

A constraint's value is Optuna's: at most 0 is feasible (``latency_ms<=2`` gives ``latency_ms - 2``).
They are stored on each finished trial as Optuna's ``constraints:<label>`` system attributes, which
its TPE, NSGA-II and GP samplers read, and the trial's ``feasible`` user attribute says whether all hold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from search.exceptions import SearchError

DIRECTIONS = {"min": "minimize", "max": "maximize", "minimize": "minimize", "maximize": "maximize"}
FEASIBLE_ATTR = "feasible"
"""Trial user attribute: whether every constraint holds (absent in a study without constraints)."""


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str
    """``minimize`` or ``maximize``."""

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"

    def text(self) -> str:
        return f"{self.metric}:{self.direction[:3]}"


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str
    """``<=`` or ``>=``."""
    bound: float

    @property
    def label(self) -> str:
        """How it is written, stored and shown: ``latency_ms<=2``."""
        return f"{self.metric}{self.op}{self.bound:g}"

    def value(self, observed: float) -> float:
        """Optuna's constraint value: at most 0 when ``observed`` meets the bound."""
        return observed - self.bound if self.op == "<=" else self.bound - observed


_METRIC = r"[A-Za-z_][A-Za-z0-9_.\-/]*"


def parse_objective(text: str) -> Objective:
    """``METRIC:min|max`` (``--objective``), e.g. ``val_accuracy:max``."""
    metric, sep, direction = str(text).strip().rpartition(":")
    if not sep or not re.fullmatch(_METRIC, metric) or direction.lower() not in DIRECTIONS:
        raise SearchError(f"--objective {text!r}: expected METRIC:min or METRIC:max, e.g. --objective val_accuracy:max")
    return Objective(metric, DIRECTIONS[direction.lower()])


def parse_constraint(text: str) -> Constraint:
    """``METRIC<=BOUND`` or ``METRIC>=BOUND`` (``--constraint``), e.g. ``latency_ms<=2``."""
    found = re.fullmatch(rf"\s*({_METRIC})\s*(<=|>=)\s*(\S+)\s*", str(text))
    bound = _number(found[3]) if found else None
    if found is None or bound is None:
        raise SearchError(f"--constraint {text!r}: expected METRIC<=BOUND or METRIC>=BOUND, e.g. --constraint "
                          "'latency_ms<=2'")  # fmt: skip
    return Constraint(found[1], found[2], bound)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_objectives(items: Sequence[str]) -> list[Objective]:
    """Every ``--objective``, in order; a metric named twice is refused."""
    objectives = [parse_objective(item) for item in items]
    names = [o.metric for o in objectives]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise SearchError(f"--objective {twice} is given twice; each metric is one objective")
    return objectives


def parse_constraints(items: Sequence[str]) -> list[Constraint]:
    return [parse_constraint(item) for item in items]


def check_objective_flags(objectives: Sequence[str], constraints: Sequence[str], select: str,
                          stop_at: float | None) -> None:  # fmt: skip
    """One line for a bad ``--objective``, ``--constraint`` or ``--select``, before anything starts."""
    parse_constraints(constraints)
    from search.settings._selection import parse_select

    parse_select(select)
    if len(parse_objectives(objectives)) > 1 and stop_at is not None:
        raise SearchError("--stop-at compares one best value, and this search has several objectives (--objective); "
                          "use --timeout or --trials to bound it")  # fmt: skip


def objectives_of(stored: Sequence[Sequence[str]], metric: str, direction: str) -> list[Objective]:
    """A record's objectives (``[[metric, direction], ...]``); none stored: the study's own metric."""
    return [Objective(m, d) for m, d in stored] or [Objective(metric, direction)]


def constraints_of(stored: Sequence[str]) -> list[Constraint]:
    return [parse_constraint(text) for text in stored]


def prunes(objectives: Sequence[Objective], metric: str, direction: str) -> bool:
    """Whether the pruner may run: the one objective is the per-epoch ``metric`` the trials report,
    in the study's direction. Optuna cannot prune a multi-objective trial, and a curve of another
    metric says nothing sure about an objective measured at the trial's end."""
    return list(objectives) == [Objective(metric, direction)]


def missing_metrics(names: Sequence[str], final: Mapping[str, float], metric: str) -> list[str]:
    """The ``names`` a finished trial cannot give a value for (``metric``: the per-epoch one, always there)."""
    return [n for n in names if n != metric and n not in final]


def objective_values(objectives: Sequence[Objective], final: Mapping[str, float], metric: str,
                     best_epoch_value: float) -> list[float]:  # fmt: skip
    """A finished trial's value for each objective: the per-epoch ``metric``'s best epoch, else its final metric."""
    return [best_epoch_value if o.metric == metric else float(final[o.metric]) for o in objectives]


def constraint_values(constraints: Sequence[Constraint], final: Mapping[str, float], metric: str,
                      best_epoch_value: float) -> dict[str, float]:  # fmt: skip
    """Optuna's value of each constraint (at most 0: met), by its label."""
    seen = {**final, metric: best_epoch_value}
    return {c.label: c.value(float(seen[c.metric])) for c in constraints}


def unknown_metric_message(missing: Sequence[str], final: Mapping[str, float], trial: int) -> str:
    have = ", ".join(sorted(final)) or "none"
    return (f"--objective/--constraint name {', '.join(repr(m) for m in missing)}, which trial {trial} did not "
            f"record (its final metrics: {have})")  # fmt: skip


def gate_objective(objectives: Sequence[Objective], metric: str, direction: str) -> Objective:
    """What the champion gate compares on the test set: the first objective that is a validation
    metric (``val_*``, whose ``test_*`` twin the retrain measures), else the study's own metric."""
    return next((o for o in objectives if o.metric.startswith("val_")), Objective(metric, direction))


def describe(objectives: Sequence[Objective], constraints: Sequence[Constraint]) -> str:
    """``minimize val_loss, minimize latency_ms; subject to latency_ms<=2``, for the start of a search."""
    text = ", ".join(f"{o.direction} {o.metric}" for o in objectives)
    return text + (f"; subject to {', '.join(c.label for c in constraints)}" if constraints else "")
