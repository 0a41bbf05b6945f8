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
    log_batch = run._log_batch

    def counting(run_id, batch):
        batches.append(len(batch.get("metrics", ())))
        return log_batch(run_id, batch)

    monkeypatch.setattr(run, "_log_batch", counting)
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
    from search.tracking import _runlog

    clock = [1000.0]
    monkeypatch.setattr(_runlog.time, "monotonic", lambda: clock[0])
    run = _child(tracker)
    run.log_params({"lr": 0.1})
    run.log({"val_loss": 1.0}, step=1)  # within the interval of the run's start: held back
    run._writer.flush()
    assert tracker.client.get_run(run.run_id).data.params == {}
    clock[0] += _runlog.SEND_EVERY_S
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


def _open_child(tracker: Tracker, on_created=lambda run_id: None, end_first=None):
    experiment = tracker.experiment_id("t")
    parent = tracker.start_parent(experiment, "t", {})
    ids = (experiment, parent)
    return tracker.open_child(lambda: ids, "trial-0", "trial", {"hpsearch.trial": 0}, on_created, end_first)


def test_a_run_opened_in_the_background_is_created_first_and_then_gets_everything(tracker: Tracker) -> None:
    """open_child returns before the run exists; the run is created on the writer thread, then
    on_created sees its id, and the writes queued meanwhile land in it; a dead attempt's run given
    as end_first is ended KILLED first."""
    dead = _child(tracker)
    seen: list[str] = []
    run = _open_child(tracker, seen.append, end_first=dead.run_id)
    run.log_params({"lr": 0.1})
    run.log({"val_loss": 1.0}, step=1)
    run.finish({"hpsearch.state": "COMPLETE"}, "FINISHED")
    assert seen == [run.run_id]
    got = tracker.client.get_run(run.run_id)
    assert got.info.status == "FINISHED" and got.data.params == {"lr": "0.1"}
    assert got.data.metrics == {"val_loss": 1.0} and got.data.tags["hpsearch.state"] == "COMPLETE"
    assert tracker.client.get_run(dead.run_id).info.status == "KILLED"


def test_wait_for_opened_returns_once_the_runs_being_opened_are_recorded(tracker: Tracker) -> None:
    """What a stalled first trial's watchdog waits for before failing the trial: the run whose
    creation waits for its parent (here 1 s) has been recorded on its trial."""
    import threading
    import time

    experiment = tracker.experiment_id("t")
    parent = tracker.start_parent(experiment, "t", {})
    go = threading.Event()

    def late_parent() -> tuple[str, str]:
        go.wait(10)
        return experiment, parent

    seen: list[str] = []
    tracker.open_child(late_parent, "trial-0", "trial", {}, seen.append)
    threading.Timer(1.0, go.set).start()
    started = time.monotonic()
    tracker.wait_for_opened(30)
    assert len(seen) == 1 and 0.5 < time.monotonic() - started < 20
    tracker.wait_for_opened(30)  # nothing left being opened: at once
    assert time.monotonic() - started < 20


def test_a_run_that_cannot_start_stops_the_next_epoch_and_drops_its_writes(tracker: Tracker, monkeypatch) -> None:
    """The tracking server refuses the run: the trial's next epoch raises it (one line, what went
    wrong), its writes go nowhere, and the next run starts as usual."""
    from search.tracking import RunStartError

    experiment = tracker.experiment_id("t")
    parent = tracker.start_parent(experiment, "t", {})
    create_run = tracker.client.create_run
    calls: list[int] = []

    def server_error_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise MlflowException("API request to endpoint /api/2.0/mlflow/runs/create failed with error code 500")
        return create_run(*args, **kwargs)

    monkeypatch.setattr(tracker.client, "create_run", server_error_once)
    created: list[str] = []
    run = tracker.open_child(lambda: (experiment, parent), "trial-0", "trial", {}, created.append)
    run.log_params({"lr": 0.1})
    assert run.run_id is None  # waits for the attempt
    with pytest.raises(RunStartError, match=r"^MLflow run could not start: MlflowException: API request"):
        run.log({"val_loss": 1.0}, step=1)
    run.finish({"hpsearch.state": "FAIL"}, "FAILED")  # seen once: nothing to write, nothing raised
    run.end("FAILED", {"hpsearch.state": "FAIL"})  # no run: nothing to end
    assert created == []
    second = tracker.open_child(lambda: (experiment, parent), "trial-1", "trial", {}, created.append)
    second.log({"val_loss": 0.5}, step=1)
    second.finish({"hpsearch.state": "COMPLETE"}, "FINISHED")
    assert created == [second.run_id]
    assert tracker.client.get_run(second.run_id).data.metrics == {"val_loss": 0.5}


def test_a_run_whose_trial_cannot_record_it_is_ended_killed(tracker: Tracker) -> None:
    """Recording the run on its trial failed (the trial was reaped meanwhile): nobody else knows the
    run, so it ends KILLED, and the trial meets the error at its next epoch, or at its end."""
    created: list[str] = []

    def reaped(run_id: str) -> None:
        created.append(run_id)
        raise RuntimeError("trial 0 was finished by another process")

    run = _open_child(tracker, reaped)
    with pytest.raises(RuntimeError, match="finished by another process"):
        run.flush()
    run.flush()  # handed over once
    [run_id] = created
    assert run.run_id is None
    assert tracker.client.get_run(run_id).info.status == "KILLED"


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


def test_a_study_experiment_opens_in_mlflow_training_view(tracker: Tracker) -> None:
    """MLflow 3's UI shows an experiment of no kind as a GenAI one; a study's is model training."""
    experiment = tracker.client.get_experiment(tracker.experiment_id("kind"))
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert "tags.hpsearch.role = 'trial'" in experiment.tags["mlflow.note.content"]
