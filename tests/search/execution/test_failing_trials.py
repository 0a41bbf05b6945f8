"""Trials that go wrong (divergence, a bug in the study, out of memory, an MLflow error at run start)
end FAIL with their reason, in Optuna and in MLflow, and the worker goes on to the next trial."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from search_helpers import FAULTY_STUDY, SLEEP_STUDY

# -- trials that go wrong ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def faulty_study(tmp_path_factory: pytest.TempPathFactory, cli) -> tuple[Path, list[Any], str]:
    """Four trials by one worker: one trains, one diverges, one hits a bug in the study, one runs out of memory."""
    import optuna

    work = tmp_path_factory.mktemp("faulty")
    proc = cli("start", "--study", str(FAULTY_STUDY), "--trials", "4", "--workers", "1", "--pruner", "none",
               "--no-retrain", cwd=work, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    study = optuna.load_study(study_name="faulty", storage=f"sqlite:///{work}/.search/optuna.db")
    return work / ".search", sorted(study.get_trials(), key=lambda t: t.number), proc.stdout


@pytest.mark.slow
def test_each_failing_trial_ends_fail_with_its_reason_and_the_worker_goes_on(faulty_study):
    _, trials, stdout = faulty_study
    assert [(t.user_attrs["mode"], t.state.name) for t in trials] == [
        ("ok", "COMPLETE"), ("diverge", "FAIL"), ("bug", "FAIL"), ("oom", "FAIL"),
    ]  # fmt: skip
    reasons = [t.user_attrs.get("fail_reason") for t in trials]
    assert reasons[1] == "diverged at epoch 2"
    assert reasons[2] == "KeyError: 'n_features'"
    assert reasons[3].startswith("CUDA out of memory. Tried to allocate 20.00 GiB")
    assert len({t.user_attrs["worker"] for t in trials}) == 1
    assert "4/4 trials finished (1 complete, 0 pruned, 3 failed)" in stdout


@pytest.mark.slow
def test_failed_trials_carry_their_reason_to_mlflow_and_a_bug_its_traceback(faulty_study):
    from mlflow import MlflowClient

    project, trials, _ = faulty_study
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    for trial in trials[1:]:
        run = client.get_run(trial.user_attrs["mlflow_run_id"])
        assert run.info.status == "FAILED"
        assert run.data.tags["hpsearch.fail_reason"] == trial.user_attrs["fail_reason"]
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert ("traceback.txt" in artifacts) == (trial.user_attrs["mode"] == "bug")
    bug_run = trials[2].user_attrs["mlflow_run_id"]
    text = Path(client.download_artifacts(bug_run, "traceback.txt")).read_text()
    assert "faulty_study.py" in text and 'data.info["n_features"]' in text and text.strip().endswith("'n_features'")


def test_a_first_trial_started_before_mlflow_is_imported_gets_its_run_all_the_same(tmp_path):
    """A worker's first trial starts while MLflow is still being imported: it records its worker at
    once, its run is created on the writer thread meanwhile, and it ends linked to a complete run;
    the next trial creates its run before training, as every later one does."""
    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.execution import connect
    from search.execution._trial import run_trial
    from search.settings import SearchSettings
    from search.tracking import Tracker

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path)
    opts = StartOptions(study=str(SLEEP_STUDY), trials=2, settings=SearchSettings(pruner="none"),
                        study_options={"epoch_seconds": 0.0})  # fmt: skip
    create_or_resume(loc, prepare(opts), 2)
    ctx = connect(loc, "sleep", "test-worker")
    ctx.tracker = Tracker(loc.tracking())  # as if the warm-up had not made MLflow's client yet
    assert not ctx.tracker.ready
    outcomes = []
    for _ in range(2):
        trial, _ = ctx.coordinator.claim(ctx.optuna_study)
        outcomes.append(run_trial(ctx, trial))
        assert ctx.tracker.ready  # the first trial's run made it
    for outcome in outcomes:
        stored = next(t for t in ctx.optuna_study.get_trials() if t.number == outcome.number)
        assert outcome.state == "COMPLETE" and stored.user_attrs["worker"] == "test-worker"
        run = ctx.tracker.client.get_run(stored.user_attrs["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.data.tags["hpsearch.state"] == "COMPLETE"
        assert set(run.data.params) >= {"x", "lr", "trial_number"} and "val_loss" in run.data.metrics


def test_an_mlflow_error_at_run_start_fails_that_trial_and_the_worker_goes_on(tmp_path):
    """A tracking server answering HTTP 500 when a trial's run is created ends that trial, not the worker."""
    from mlflow.exceptions import MlflowException

    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.execution import connect
    from search.execution._trial import run_trial
    from search.settings import SearchSettings

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path)
    opts = StartOptions(study=str(SLEEP_STUDY), trials=2, settings=SearchSettings(pruner="none"),
                        study_options={"epoch_seconds": 0.0})  # fmt: skip
    create_or_resume(loc, prepare(opts), 2)
    ctx = connect(loc, "sleep", "test-worker")
    create_run = ctx.tracker.client.create_run
    calls = []

    def server_error_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise MlflowException("API request to endpoint /api/2.0/mlflow/runs/create failed with error code 500")
        return create_run(*args, **kwargs)

    ctx.tracker.client.create_run = server_error_once  # type: ignore[method-assign]
    first, _ = ctx.coordinator.claim(ctx.optuna_study)
    failed = run_trial(ctx, first)
    second, _ = ctx.coordinator.claim(ctx.optuna_study)
    done = run_trial(ctx, second)
    assert failed.state == "FAIL" and failed.reason.startswith("MLflow run could not start: MlflowException: API")
    stored = ctx.coordinator.storage.get_trial(first._trial_id)
    assert stored.state.name == "FAIL" and stored.user_attrs["fail_reason"] == failed.reason
    assert done.state == "COMPLETE"  # the same worker trained the next trial
