"""One row per trial: what ``search trials`` prints, the report's table shows and the live view sums up.

Every attempt is its own row. A retry (a trial queued again after its worker died) names the
attempt it retries in ``retry_of`` and the logical trial it continues in ``logical``.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    """The trial's other user attributes (throughput, overhead, resumed epoch, ...)."""


_OWN_ATTRS = {"worker", "host", "mlflow_run_id", "fail_reason", "epochs_run", "fit_seconds"}


def trial_row(trial: FrozenTrial, now: float | None = None) -> TrialRow:
    import time

    attrs = trial.user_attrs
    history = trial.system_attrs.get("retry_history") or []
    start = trial.datetime_start.timestamp() if trial.datetime_start else None
    end = trial.datetime_complete.timestamp() if trial.datetime_complete else (now or time.time())
    epochs = attrs.get("epochs_run", max(trial.intermediate_values, default=0))
    pruned = int(epochs) if trial.state.name == "PRUNED" else None
    return TrialRow(
        number=trial.number, state=trial.state.name, value=trial.value, params=dict(trial.params),
        epochs=int(epochs), duration_seconds=None if start is None else round(max(0.0, end - start), 3),
        worker=attrs.get("worker"), host=attrs.get("host"), retry_of=int(history[-1]) if history else None,
        logical=int(trial.system_attrs.get("failed_trial", trial.number)), fail_reason=attrs.get("fail_reason"),
        mlflow_run_id=attrs.get("mlflow_run_id"), fit_seconds=attrs.get("fit_seconds"), pruned_epoch=pruned,
        datetime_start=trial.datetime_start.isoformat() if trial.datetime_start else None,
        datetime_complete=trial.datetime_complete.isoformat() if trial.datetime_complete else None,
        extra={k: v for k, v in attrs.items() if k not in _OWN_ATTRS},
    )  # fmt: skip


def trial_rows(coordinator: Coordinator, states: tuple[str, ...] | None = None) -> list[TrialRow]:
    """Every trial of the study in number order, read once; only ``states`` when given."""
    study_id = coordinator.study_id()
    trials = coordinator.storage.get_all_trials(study_id, deepcopy=False)
    rows = [trial_row(t) for t in trials]
    return [r for r in rows if states is None or r.state in states]


def failure_reasons(rows: list[TrialRow]) -> list[tuple[str, int]]:
    """Failed trials' reasons with counts, most frequent first (a reason's first line, numbers kept)."""
    reasons = Counter((r.fail_reason or "no reason recorded").strip().splitlines()[0] for r in rows
                      if r.state == "FAIL")  # fmt: skip
    return reasons.most_common()


def rows_to_json(rows: list[TrialRow]) -> str:
    return json.dumps([asdict(r) for r in rows], indent=2, default=str)


CSV_COLUMNS = ("number", "state", "value", "epochs", "duration_seconds", "worker", "host", "retry_of", "logical",
               "fail_reason", "mlflow_run_id")  # fmt: skip


def rows_to_csv(rows: list[TrialRow]) -> str:
    """One line per trial; each parameter is its own ``params.<name>`` column, as in MLflow's export."""
    names = sorted({name for r in rows for name in r.params})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *(f"params.{n}" for n in names)])
    for r in rows:
        record = asdict(r)
        writer.writerow([_cell(record[c]) for c in CSV_COLUMNS] + [_cell(r.params.get(n)) for n in names])
    return out.getvalue()


def _cell(value: Any) -> str:
    return "" if value is None else str(value)
