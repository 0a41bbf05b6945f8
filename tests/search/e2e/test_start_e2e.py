"""`search start` end to end on the embedded default, in an empty directory, as a user runs it."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_search(tmp_path_factory, cli):
    workdir = tmp_path_factory.mktemp("e2e")
    proc = cli(
        "start", "--study", "resmlp", "--trials", "8", "--workers", "2",
        "--pruner", "median:startup=1,warmup=0",
        "--study-option", "search_epochs=6", "--study-option", "full_epochs=15",
        cwd=workdir, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return workdir, proc


def _optuna_trials(workdir):
    import optuna

    study = optuna.load_study(study_name="resmlp", storage=f"sqlite:///{workdir}/.search/optuna.db")
    return study.get_trials(deepcopy=False)


def test_exactly_the_budget_of_trials_finished_some_pruned(finished_search):
    from optuna.trial import TrialState

    workdir, _ = finished_search
    trials = _optuna_trials(workdir)
    states = [t.state for t in trials]
    assert len(trials) == 8
    assert all(s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) for s in states)
    assert states.count(TrialState.PRUNED) >= 1
    assert {t.user_attrs["worker"] for t in trials} and all("epochs_run" in t.user_attrs for t in trials)
    finished = [t for t in trials if t.state != TrialState.FAIL]
    assert finished and all(t.user_attrs["model_tflops"] > 0 for t in finished)  # no mfu on a CPU
    # What each model costs to deploy, beside its validation metrics; a pruned one is not timed.
    for t in finished:
        final = t.user_attrs["final_metrics"]
        assert final["params"] > 1000 and final["peak_rss_mb"] > 0 and "val_accuracy" in final
        timed = {"flops_per_sample", "latency_ms", "latency_ms_batch"}
        assert timed <= set(final) if t.state == TrialState.COMPLETE else not timed & set(final)
        if t.state == TrialState.COMPLETE:  # a forward is at least a multiply-add per weight
            assert final["latency_ms"] > 0 and final["latency_ms_batch"] > 0
            assert final["flops_per_sample"] > final["params"]


def test_every_trial_is_a_child_run_with_a_validation_curve(finished_search):
    from mlflow import MlflowClient

    workdir, _ = finished_search
    client = MlflowClient(f"sqlite:///{workdir}/.search/mlflow.db")
    experiment = client.get_experiment_by_name("resmlp")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("hpsearch.role") == "study"]
    children = [r for r in runs if r.data.tags.get("hpsearch.role") == "trial"]
    assert len(parents) == 1 and len(children) == 8
    parent_id = parents[0].info.run_id
    assert all(r.data.tags["mlflow.parentRunId"] == parent_id for r in children)
    by_trial = {t.number: t for t in _optuna_trials(workdir)}
    for run in children:
        trial = by_trial[int(run.data.tags["hpsearch.trial"])]
        history = client.get_metric_history(run.info.run_id, "val_loss")
        assert [m.step for m in history] == list(range(1, trial.user_attrs["epochs_run"] + 1))
        # The worker's CPU for the trial: it trained, so some, and one worker thread at a time does most.
        assert 0 < trial.user_attrs["cpu_seconds"] < 4 * trial.user_attrs["wall_seconds"]
        assert run.data.tags["hpsearch.state"] == trial.state.name
        assert "lr" in run.data.params and "lr" in run.data.metrics and "grad_norm" in run.data.metrics
        assert {"grad_norm_max", "skipped_steps", "nonfinite_grad_norms", "model_tflops"} <= set(run.data.metrics)
        final = trial.user_attrs["final_metrics"]
        for name in ("params", "flops_per_sample", "latency_ms", "latency_ms_batch", "peak_rss_mb"):
            assert run.data.metrics.get(name) == final.get(name), name  # both or neither (pruned: not timed)
        assert trial.state.name != "COMPLETE" or run.data.params["latency_batch"] == "64"
    pruned = [r for r in children if r.data.tags["hpsearch.state"] == "PRUNED"]
    assert pruned and all("hpsearch.pruned_epoch" in r.data.tags for r in pruned)
    assert "best_value" in parents[0].data.metrics


def test_champion_model_predicts_raw_digits_test_rows(finished_search):
    import mlflow

    from studies._tabular import digits_table, split_indices

    workdir, proc = finished_search
    assert "models:/resmlp@champion" in proc.stdout
    mlflow.set_tracking_uri(f"sqlite:///{workdir}/.search/mlflow.db")
    mlflow.set_registry_uri(f"sqlite:///{workdir}/.search/mlflow.db")
    client = mlflow.MlflowClient()
    champion = client.get_model_version_by_alias("resmlp", "champion")
    assert str(champion.version) == "1"
    retrain_run = client.get_run(champion.run_id)
    assert retrain_run.data.tags["retrain"] == "true"
    # Every epoch's batch (written in the background) landed before the run ended.
    assert retrain_run.info.status == "FINISHED" and "lr" in retrain_run.data.params
    epochs = [m.step for m in client.get_metric_history(champion.run_id, "val_loss")]
    assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) >= 2
    artifacts = {a.path for a in client.list_artifacts(champion.run_id, "test")}
    assert {"test/classification_report.txt", "test/confusion_matrix.png"} <= artifacts

    model = mlflow.pyfunc.load_model("models:/resmlp@champion")
    table = digits_table()
    _, _, test_idx = split_indices(table.y, table.class_names, seed=0)
    logits = model.predict(table.x[test_idx].astype(np.float32))
    accuracy = float((np.asarray(logits).argmax(axis=1) == table.y[test_idx]).mean())
    assert accuracy >= 0.9


def test_summary_reports_overhead_and_next_steps(finished_search):
    _, proc = finished_search
    assert re.search(
        r"time outside training \(claiming, setting up, tracking\): median \d+\.\d\d s a trial, "
        r"\d+\.\d% of the trials' time",
        proc.stdout,
    ), proc.stdout
    assert "search dashboard --name resmlp" in proc.stdout


def test_workers_loaded_the_study_and_its_data_while_it_was_being_created(finished_search):
    workdir, _ = finished_search
    for index in (0, 1):
        log = (workdir / ".search" / "logs" / f"worker-{index}.log").read_text()
        assert "using the study and data loaded while the study was being created" in log, log


def test_second_start_resumes_and_counts_finished_trials(finished_search, cli):
    workdir, _ = finished_search
    proc = cli("start", "--study", "resmlp", "--trials", "9", "--workers", "1", "--no-retrain",
               "--pruner", "median:startup=1,warmup=0", "--study-option", "search_epochs=6",
               "--study-option", "full_epochs=15", cwd=workdir)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "resumed (8 trials already finished)" in proc.stdout
    assert len(_optuna_trials(workdir)) == 9
    # the stored options are the ones asked for: the early worker's study is used on resume too
    log = (workdir / ".search" / "logs" / "worker-0.log").read_text()
    assert log.count("using the study and data loaded while the study was being created") == 2, log
