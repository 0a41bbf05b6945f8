"""``search profile``: one trial's configuration, a few optimizer steps under torch.profiler, logged on its run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.settings import load_study

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from search.coordination import Coordinator
    from search.tracking._tracker import Tracker

WAIT, WARMUP = 1, 2


@dataclass(frozen=True)
class ProfileResult:
    trace: Path
    table_path: Path
    table: str
    steps: int
    samples_per_second: float
    run_id: str | None


def profile_trial(coordinator: Coordinator, tracker: Tracker, trial: FrozenTrial, out_dir: Path,
                  active: int = 5) -> ProfileResult:  # fmt: skip
    """Rebuild ``trial``'s model and training setup (as retrain does, with its own params) and profile
    ``active`` optimizer steps on just enough training rows; log trace, table and throughput on its run."""
    import optuna

    import trainer
    from studies import study_infra

    record = coordinator.read_record()
    study = load_study(record.study_ref, record.options, record.narrow)
    params = study.suggest(optuna.trial.FixedTrial(trial.params, number=trial.number))
    data = study.load_data()
    model = study.build_model(params, data)
    config = study.train_config(params, study.search_fidelity).replace(epochs=1)
    infra = study_infra(study, params, study.search_fidelity).replace(checkpoint_dir=None)
    steps = WAIT + WARMUP + active
    train = _first_rows(data.train, steps * config.batch_size * config.grad_accum_steps)
    with trainer.profiled(out_dir, wait=WAIT, warmup=WARMUP, active=active) as prof:
        result = trainer.fit(model, train, _first_rows(data.val, config.batch_size), data.task, config,
                             infra=infra, on_step=prof.step)  # fmt: skip
    table_path = out_dir / "top_operators.txt"
    table_path.write_text(prof.table)
    run_id = trial.user_attrs.get("mlflow_run_id")
    if run_id:
        client = tracker.client
        client.log_artifact(run_id, str(prof.trace), "profile")
        client.log_artifact(run_id, str(table_path), "profile")
        client.log_metric(run_id, "profile_samples_per_second", float(result.samples_per_second))
    return ProfileResult(prof.trace, table_path, prof.table, prof.steps, result.samples_per_second, run_id)


def _first_rows(data: Any, n: int) -> Any:
    import torch

    size = len(data)
    if n >= size:
        return data
    indices = torch.arange(n)
    return data.subset(indices) if hasattr(data, "subset") else torch.utils.data.Subset(data, indices.tolist())
