"""An --objective or --constraint naming a metric the trials do not record: the first complete trial
finds it, fails, and stops the study (no new trial); starting it again is one line and exit 2."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from search_helpers import SLEEP_STUDY

from search.coordination import objective_error
from search.execution._objectives import ObjectiveMetricError, scored

FINAL = {"train_loss": 0.2, "val_loss": 0.1, "val_rmse": 0.3}


@pytest.fixture
def study(tmp_path):
    """A new sleep study (created, its parent run made, nothing trained) minimising val_loss and latency_ms."""
    from search.api import StartOptions, create_or_resume, prepare, resolve_locations

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path / "p")
    opts = StartOptions(study=str(SLEEP_STUDY), trials=4, objectives=("val_loss:min", "latency_ms:min"),
                        constraints=("val_rmse<=1",), study_options={"epoch_seconds": 0.0})  # fmt: skip
    coordinator, _ = create_or_resume(loc, prepare(opts))
    return coordinator, loc


def test_a_metric_no_trial_records_stops_the_study(study, tmp_path, search_main):
    coordinator, loc = study
    ctx = SimpleNamespace(record=coordinator.read_record(), coordinator=coordinator)  # what scored reads of a worker
    with pytest.raises(ObjectiveMetricError, match="^--objective/--constraint name 'latency_ms', which trial 3 did"):
        scored(ctx, 3, FINAL, 0.05, pruned=False)  # type: ignore[arg-type]
    assert "'latency_ms'" in (objective_error(coordinator) or "")
    assert coordinator.budget() == 0  # no new trial: none had been claimed
    code, _, err = search_main(["start", "--study", str(SLEEP_STUDY), "--study-option", "epoch_seconds=0.0",
                                "--workers", "0", "--project-dir", str(tmp_path / "p")])  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "study 'sleep' stopped: --objective/--constraint name" in err


def test_known_metrics_give_values_feasibility_and_optunas_constraints(study):
    coordinator, _ = study
    ctx = SimpleNamespace(record=coordinator.read_record(), coordinator=coordinator)
    value, attrs, system = scored(ctx, 0, {**FINAL, "latency_ms": 1.5}, 0.05, pruned=False)  # type: ignore[arg-type]
    assert value == [0.05, 1.5] and attrs == {"feasible": True}
    assert system == {"constraints:val_rmse<=1": pytest.approx(-0.7)}
    assert objective_error(coordinator) is None and coordinator.budget() == 4
