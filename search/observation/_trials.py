"""One row per trial: what ``search trials`` prints, the report's table shows and the live view sums up.

Every attempt is its own row. A retry (a trial queued again after its worker died) names the
attempt it retries in ``retry_of`` and the logical trial it continues in ``logical``.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from optuna.trial import FrozenTrial

    from search.coordination import Coordinator

STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


@dataclass(frozen=True)
class TrialRow:
    number: int
    state: str
    value: float | None
    params: dict[str, Any]
    epochs: int
    """Epochs trained (the last reported epoch while it runs)."""
    duration_seconds: float | None
    """Start to finish (to now while it runs); None before it starts."""
    worker: str | None
    host: str | None
    retry_of: int | None
    """The attempt this trial retries, when a dead attempt was queued again."""
    logical: int
    """The logical trial: its own number, or the first attempt's for a retry."""
    fail_reason: str | None
    mlflow_run_id: str | None
    fit_seconds: float | None = None
    """Seconds inside the trainer (from the trial's record; None for trials that did not finish cleanly)."""
    pruned_epoch: int | None = None
    datetime_start: str | None = None
    datetime_complete: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    """The model's metrics at its last epoch (losses, accuracy, F1, ...); empty for a trial that has
    not finished, or finished before trials kept them."""
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    """The trial's other user attributes (throughput, overhead, resumed epoch, ...)."""
    retried_as: int | None = None
    """The trial that continues this one: a dead or interrupted attempt is failed and queued again as
    a retry, which counts in its place (the attempt is no failure of the logical trial)."""
    values: list[float] | None = None
    """One value per objective (``--objective``; ``value`` is the first): several only in a multi-objective study."""
    feasible: bool | None = None
    """Whether it meets every ``--constraint``; None in a study without constraints, or before it finishes."""
    folds: list[float] | None = None
    """A k-fold trial's (``--study-option folds=K``): the value of each fold it has finished, fold 0
    first (its value is their mean); None for a trial of one validation split."""


_OWN_ATTRS = {"worker", "host", "mlflow_run_id", "fail_reason", "epochs_run", "fit_seconds", "final_metrics",
              "feasible"}  # fmt: skip


def trial_row(trial: FrozenTrial, now: float | None = None) -> TrialRow:
    import time

    attrs = trial.user_attrs
    history = trial.system_attrs.get("retry_history") or []
    start = trial.datetime_start.timestamp() if trial.datetime_start else None
    end = trial.datetime_complete.timestamp() if trial.datetime_complete else (now or time.time())
    folds = _fold_values(trial)
    # A running k-fold trial reports folds, not epochs: its finished folds' epochs.
    running = max(trial.intermediate_values, default=0) if folds is None else sum(_fold_epochs(attrs).values())
    epochs = attrs.get("epochs_run", running)
    pruned = int(epochs) if trial.state.name == "PRUNED" else None
    return TrialRow(
        number=trial.number, state=trial.state.name, value=trial.values[0] if trial.values else None,
        values=list(trial.values) if trial.values else None, feasible=attrs.get("feasible"), params=_params(trial),
        epochs=int(epochs), duration_seconds=None if start is None else round(max(0.0, end - start), 3),
        worker=attrs.get("worker"), host=attrs.get("host"), retry_of=int(history[-1]) if history else None,
        logical=int(trial.system_attrs.get("failed_trial", trial.number)), fail_reason=attrs.get("fail_reason"),
        mlflow_run_id=attrs.get("mlflow_run_id"), fit_seconds=attrs.get("fit_seconds"), pruned_epoch=pruned,
        datetime_start=trial.datetime_start.isoformat() if trial.datetime_start else None,
        datetime_complete=trial.datetime_complete.isoformat() if trial.datetime_complete else None,
        metrics=dict(attrs.get("final_metrics") or {}), extra={k: v for k, v in attrs.items() if k not in _OWN_ATTRS},
        folds=folds,
    )  # fmt: skip


def _fold_epochs(attrs: dict[str, Any]) -> dict[int, int]:
    """Fold -> its epochs, for the folds a k-fold trial has finished (``fold_<k>_epochs``)."""
    parts = (k.split("_") for k in attrs if k.startswith("fold_") and k.endswith("_epochs"))
    return {int(p[1]): int(attrs[f"fold_{p[1]}_epochs"]) for p in parts if len(p) == 3 and p[1].isdigit()}


def _fold_values(trial: FrozenTrial) -> list[float] | None:
    """A k-fold trial's fold values (reported at step = fold), None for one split: a fold's attributes
    are written before its value is reported, so a fold is finished once both are there."""
    done = _fold_epochs(trial.user_attrs)
    if not done:
        return None
    return [float(trial.intermediate_values[k]) for k in sorted(done) if k in trial.intermediate_values]


def _params(trial: FrozenTrial) -> dict[str, Any]:
    """Its params; a queued trial's are the values it was queued with (a grid point, a known configuration)."""
    if trial.params or trial.state.name != "WAITING":
        return dict(trial.params)
    return dict(trial.system_attrs.get("fixed_params") or {})


def trial_rows(coordinator: Coordinator, states: tuple[str, ...] | None = None) -> list[TrialRow]:
    """Every trial of the study in number order, read once; only ``states`` when given."""
    study_id = coordinator.study_id()
    trials = coordinator.storage.get_all_trials(study_id, deepcopy=False)
    rows = [trial_row(t) for t in trials]
    retries = {r.retry_of: r.number for r in rows if r.retry_of is not None}
    rows = [replace(r, retried_as=retries.get(r.number)) if r.number in retries else r for r in rows]
    return [r for r in rows if states is None or r.state in states]


def continued_attempts(trials: Iterable[FrozenTrial]) -> set[int]:
    """Numbers of the attempts that a later attempt continues: a resumption (freeze-thaw) or a
    replaced trial's copy (population-based training) names its attempt in ``resumed_from``, and a
    retry lists the attempt it follows last in ``retry_history``. A retry that stood down (``not
    needed: ...``, its trial had finished) continues nothing."""
    out: set[int] = set()
    for trial in trials:
        if str(trial.user_attrs.get("fail_reason", "")).startswith("not needed"):
            continue
        if "resumed_from" in trial.user_attrs:
            out.add(int(trial.user_attrs["resumed_from"]))
        if trial.system_attrs.get("retry_history"):
            out.add(int(trial.system_attrs["retry_history"][-1]))
    return out


def paused_now(trials: Iterable[FrozenTrial]) -> dict[int, FrozenTrial]:
    """Logical trial number -> its paused attempt (freeze-thaw) that no attempt continues yet."""
    trials = list(trials)
    taken = continued_attempts(trials)
    return {int(t.system_attrs.get("failed_trial", t.number)): t for t in trials
            if t.state.name == "PRUNED" and "paused_at" in t.user_attrs and t.number not in taken}  # fmt: skip


def top_value_rows(coordinator: Coordinator, key: SortKey, top: int,
                   states: tuple[str, ...] | None = None) -> list[TrialRow]:  # fmt: skip
    """``sort_rows(trial_rows(coordinator, states), key, top)`` for ``key`` the objective (``value``),
    reading in full only the ``top`` trials shown: of the others their values and states (one narrow
    query), so ``search trials --top 20`` of 100,000 trials reads 20, not 100,000."""
    import storage as st

    study_id = coordinator.study_id()
    with coordinator.storage.engine.connect() as conn:
        values = [v for v in st.trial_objectives(conn, study_id) if states is None or v[2] in states]
        retried = st.retried_as(conn, study_id)
    have = [v for v in values if v[3] is not None and v[3] == v[3]]  # NaN sorts with the missing, as sort_value
    missing = [v for v in values if v[3] is None or v[3] != v[3]]
    have.sort(key=lambda v: v[3], reverse=key.descending)  # type: ignore[arg-type, return-value]
    chosen = [v[0] for v in (have + missing)[:top]]
    trials = st.read_some(coordinator.storage, chosen)
    rows = [trial_row(trials[tid]) for tid in chosen if tid in trials]
    rows = [replace(r, retried_as=retried[r.number]) if r.number in retried else r for r in rows]
    return sort_rows(rows, key, top)


def failure_reasons(rows: list[TrialRow]) -> list[tuple[str, int]]:
    """Failed trials' reasons with counts, most frequent first (a reason's first line, numbers kept)."""
    return count_reasons([r.fail_reason for r in rows if r.state == "FAIL"])


def count_reasons(reasons: list[Any]) -> list[tuple[str, int]]:
    """Failed trials' ``fail_reason`` values counted by first line, most frequent first."""
    return Counter((reason or "no reason recorded").strip().splitlines()[0] for reason in reasons).most_common()


def rows_to_json(rows: list[TrialRow]) -> str:
    return json.dumps([asdict(r) for r in rows], indent=2, default=str)


_NESTED = ("params", "metrics", "extra")
CSV_COLUMNS = tuple(f.name for f in fields(TrialRow) if f.name not in _NESTED)


def rows_to_csv(rows: list[TrialRow]) -> str:
    """One line per trial with the JSON's fields: each parameter, final metric and other trial
    attribute is its own ``params.<name>``, ``metrics.<name>`` or ``extra.<name>`` column (as in
    MLflow's export)."""
    nested = [(group, name) for group in _NESTED for name in sorted({n for r in rows for n in getattr(r, group)})]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *(f"{group}.{name}" for group, name in nested)])
    for r in rows:
        record = asdict(r)
        writer.writerow([_cell(record[c]) for c in CSV_COLUMNS]
                        + [_cell(record[group].get(name)) for group, name in nested])  # fmt: skip
    return out.getvalue()


def _cell(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return "" if value is None else str(value)


SORT_FIELDS = ("value", "duration", "epochs")
_LOWER_IS_BETTER = ("loss", "perplexity", "error", "mse", "mae", "rmse", "latency", "params", "flops", "_mb")


@dataclass(frozen=True)
class SortKey:
    """What ``search trials --sort`` orders by: the objective (``value``), ``duration``, ``epochs`` or
    a final metric, best first unless told (``METRIC:asc`` / ``METRIC:desc``)."""

    name: str
    descending: bool


def metric_names(rows: list[TrialRow]) -> list[str]:
    """The final metrics some trial has: the model's, by name, then its deployment metrics."""
    from search.tracking import DEPLOYMENT_METRICS

    names = {name for r in rows for name in r.metrics}
    return sorted(names - set(DEPLOYMENT_METRICS)) + [name for name in DEPLOYMENT_METRICS if name in names]


def parse_sort(spec: str, rows: list[TrialRow], metric: str, direction: str) -> SortKey:
    """``NAME`` or ``NAME:asc|desc``. Without an order: the objective's direction for ``value`` (and
    for the study's metric), ascending for duration, epochs, loss- or error-like metrics and
    deployment costs (latency, params, FLOPs, memory), descending for the rest (accuracy, F1)."""
    from search.exceptions import SearchError

    name, _, order = spec.partition(":")
    if order not in ("", "asc", "desc"):
        raise SearchError(f"--sort {spec}: the order after ':' is asc or desc")
    available = [*SORT_FIELDS, *metric_names(rows)]
    if name not in available:
        raise SearchError(f"--sort {name}: no trial has it; sort by one of: {', '.join(available)}")
    if order:
        return SortKey(name, order == "desc")
    if name in ("value", metric):
        return SortKey(name, direction == "maximize")
    lower = name in ("duration", "epochs") or any(word in name.lower() for word in _LOWER_IS_BETTER)
    return SortKey(name, not lower)


def sort_value(row: TrialRow, name: str) -> float | None:
    fixed = {"value": row.value, "duration": row.duration_seconds, "epochs": row.epochs}
    value = fixed[name] if name in fixed else row.metrics.get(name)
    return None if value is None or value != value else float(value)  # NaN sorts with the missing


def sort_rows(rows: list[TrialRow], key: SortKey, top: int | None = None) -> list[TrialRow]:
    """``rows`` by ``key``, ties in trial order, trials without it last; the first ``top`` when given."""
    have = [r for r in rows if sort_value(r, key.name) is not None]
    missing = [r for r in rows if sort_value(r, key.name) is None]
    have.sort(key=lambda r: sort_value(r, key.name) or 0.0, reverse=key.descending)
    ordered = have + missing
    return ordered if top is None else ordered[:top]


def deployment_text(metrics: dict[str, float], batch: int | None) -> str:
    """A model's deployment metrics in a line (``search best``): ``26.4k params, 52.7k FLOPs/sample,
    latency 0.052 ms (batch 1), 0.0038 ms/sample (batch 64), peak RSS 512 MiB``; empty without any."""
    texts: dict[str, Callable[[float], str]] = {
        "params": lambda v: f"{_si(v)} params",
        "flops_per_sample": lambda v: f"{_si(v)} FLOPs/sample",
        "latency_ms": lambda v: f"latency {v:.3g} ms (batch 1)",
        "latency_ms_batch": lambda v: f"{v:.3g} ms/sample (batch {batch or '?'})",
        "peak_memory_mb": lambda v: f"peak GPU memory {v:.0f} MiB",
        "peak_rss_mb": lambda v: f"peak RSS {v:.0f} MiB",
    }
    return ", ".join(text(metrics[name]) for name, text in texts.items() if name in metrics)


def _si(value: float) -> str:
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"
