"""A trial's MLflow run written in the background: everything lands, in order, and failures surface."""

import os
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException

from search.tracking import Tracker
from storage import resolve_tracking


@pytest.fixture
def tracker(tmp_path: Path) -> Tracker:
    return Tracker(resolve_tracking(None, tmp_path, None))


def _child(tracker: Tracker):
    experiment = tracker.experiment_id("t")
    parent = tracker.start_parent(experiment, "t", {})
    return tracker.start_child(experiment, parent, "trial-0", "trial", {"hpsearch.trial": 0})


def test_params_metrics_tags_and_end_all_land_in_order(tracker: Tracker) -> None:
    run = _child(tracker)
    run.log_params({f"p{i}": i for i in range(130)})  # more than one batch may carry
    for epoch in range(1, 6):
        run.log({"epoch": epoch, "val_loss": 1.0 / epoch}, step=epoch)
    run.finish({"hpsearch.state": "COMPLETE"}, "FINISHED")
    got = tracker.client.get_run(run.run_id)
    assert got.info.status == "FINISHED"
    assert got.data.params == {f"p{i}": str(i) for i in range(130)}
    assert got.data.tags["hpsearch.state"] == "COMPLETE"
    history = tracker.client.get_metric_history(run.run_id, "val_loss")
    assert [(m.step, m.value) for m in history] == [(e, 1.0 / e) for e in range(1, 6)]
    assert "epoch" not in got.data.metrics


def test_short_epochs_go_in_one_batch_per_interval_and_all_land(tracker: Tracker, monkeypatch) -> None:
    """Epochs are sent when the interval has passed since the run began or the last batch, or when
    the run ends; 1,200 epochs of two metrics exceed MLflow's limit of one batch."""
    run = _child(tracker)
    batches: list[int] = []
    log_batch = run.client.log_batch

    def counting(run_id, metrics=(), params=(), tags=()):
        batches.append(len(metrics))
        return log_batch(run_id, metrics=metrics, params=params, tags=tags)

    monkeypatch.setattr(run, "client", type("Client", (), {"log_batch": staticmethod(counting),
                                                           "set_terminated": run.client.set_terminated}))  # fmt: skip
    run.log_params({"lr": 0.1})
    for epoch in range(1, 1201):
        run.log({"val_loss": 1.0 / epoch, "train_loss": 2.0 / epoch}, step=epoch)
    assert batches == []  # well within the interval: nothing sent yet
    run.flush()
    assert len(batches) == 3  # 2,400 metrics in the chunks MLflow accepts
    assert max(batches) <= 1000
    run.finish({"hpsearch.state": "COMPLETE"}, "FINISHED")
    history = tracker.client.get_metric_history(run.run_id, "val_loss")
    assert sorted(m.step for m in history) == list(range(1, 1201))
    assert tracker.client.get_run(run.run_id).data.params == {"lr": "0.1"}


def test_an_epoch_that_ends_an_interval_after_the_last_batch_is_sent_with_it(tracker: Tracker, monkeypatch) -> None:
    """Epochs longer than the interval are each sent as they end, the first one too (its params with it)."""
    from search.tracking import _tracker

    clock = [1000.0]
    monkeypatch.setattr(_tracker.time, "monotonic", lambda: clock[0])
    run = _child(tracker)
    run.log_params({"lr": 0.1})
    run.log({"val_loss": 1.0}, step=1)  # within the interval of the run's start: held back
    run._writer.flush()
    assert tracker.client.get_run(run.run_id).data.params == {}
    clock[0] += _tracker.SEND_EVERY_S
    run.log({"val_loss": 0.5}, step=2)
    run._writer.flush()
    got = tracker.client.get_run(run.run_id).data
    assert got.params == {"lr": "0.1"} and got.metrics == {"val_loss": 0.5}
    assert [m.step for m in tracker.client.get_metric_history(run.run_id, "val_loss")] == [1, 2]
    run.finish({"hpsearch.state": "COMPLETE"}, "FINISHED")


def test_a_failed_background_write_is_raised_by_finish(tracker: Tracker) -> None:
    run = _child(tracker)
    run.log_params({"lr": 0.1})
    run.log({"val_loss": 1.0}, step=1)
    run.flush()
    run.log_params({"lr": 0.2})  # MLflow refuses to change a logged param
    run.log({"val_loss": 0.5}, step=2)
    with pytest.raises(MlflowException, match="lr"):
        run.finish({"hpsearch.state": "COMPLETE"}, "FINISHED")
    run.flush()  # the error was handed over once; the writer goes on
    run.finish({"hpsearch.state": "FAIL"}, "FAILED")
    assert tracker.client.get_run(run.run_id).info.status == "FAILED"


def test_a_dead_attempts_run_ends_killed_even_if_it_had_finished(tracker: Tracker) -> None:
    # Its worker ended the run, then died before telling Optuna: the trial was reaped as dead.
    finished, failed = _child(tracker), _child(tracker)
    finished.finish({"hpsearch.state": "COMPLETE"}, "FINISHED")
    failed.finish({"hpsearch.state": "FAIL"}, "FAILED")
    for run in (finished, failed):
        tracker.mark_killed(run.run_id)
    assert tracker.client.get_run(finished.run_id).info.status == "KILLED"
    assert tracker.client.get_run(failed.run_id).info.status == "FAILED"  # its own end says more


def test_a_finished_study_ends_the_trial_runs_nobody_knew_of(tracker: Tracker) -> None:
    """A worker killed between creating its trial's run and storing the run's id left a RUNNING run
    no reaper could find; the study's end closes it, and only trial runs of this study."""
    from search.tracking._parent import end_orphaned_trial_runs

    experiment = tracker.experiment_id("t")
    parent = tracker.start_parent(experiment, "t", {})
    other_parent = tracker.start_parent(experiment, "u", {})
    orphan = tracker.start_child(experiment, parent, "trial-3", "trial", {})
    done = tracker.start_child(experiment, parent, "trial-4", "trial", {})
    done.finish({"hpsearch.state": "COMPLETE"}, "FINISHED")
    retrain = tracker.start_child(experiment, parent, "retrain", "retrain", {})
    elsewhere = tracker.start_child(experiment, other_parent, "trial-0", "trial", {})
    assert end_orphaned_trial_runs(tracker, experiment, parent) == 1
    status = {run.run_id: tracker.client.get_run(run.run_id).info.status for run in (orphan, done, retrain, elsewhere)}
    assert status == {orphan.run_id: "KILLED", done.run_id: "FINISHED", retrain.run_id: "RUNNING",
                      elsewhere.run_id: "RUNNING"}  # fmt: skip


@pytest.mark.parametrize(("given", "expected"), [(None, "true"), ("false", "false")])
def test_mlflow_usage_telemetry_is_off_unless_the_user_set_it(monkeypatch, capsys, given, expected):
    """The command and the workers it starts (which inherit its environment) send MLflow no usage
    telemetry, unless the user asked for it."""
    from search.cli._main import main

    if given is None:
        monkeypatch.delenv("MLFLOW_DISABLE_TELEMETRY", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", given)
    main(["--help"])  # as any command
    assert "Usage: search" in capsys.readouterr().out
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == expected
