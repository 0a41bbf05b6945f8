"""Workers that die mid-trial: their trials are failed within the grace period, retried from the last
good checkpoint, and the study's budget is spent exactly once.

The scenarios run ``search`` as users do, in subprocesses against the real PostgreSQL server, with
the training-free sleep study (``benchmarks/studies/sleep_study.py``: every epoch sleeps), so a
trial's length is known and a worker can be killed at a chosen epoch. Heartbeats every second and
a grace period of 3 s keep the waits short (``search_helpers.FAST``).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from search_helpers import (
    FAST,
    GRACE_S,
    SLEEP_STUDY,
    StudyWatch,
    assert_exact_budget,
    fresh_database,
    logical,
    mlflow_runs,
    newest_epoch,
    spawn,
    stop,
    wait_for,
)

# -- a worker dies ------------------------------------------------------------------------------


@dataclass
class KilledStudy:
    """What happened to a 2-trial study whose worker was SIGKILLed mid-trial, twice."""

    trials: list[Any]
    first_dead: int
    first_checkpoint: int
    """Newest epoch checkpoint of the first dead attempt."""
    reaped_after_s: float
    waiting_before_any_worker: list[Any]
    second_dead: int
    second_checkpoint: int
    """Newest checkpoint of the second dead attempt, truncated before its retry started."""
    follower_code: int
    last_worker_log: str
    project: Path


@pytest.fixture(scope="module")
def killed_study(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KilledStudy]:
    """``search start --workers 0`` follows a study while workers are started and SIGKILLed by hand.

    Worker A is killed in trial 0's epoch 3; with no worker alive, the follower must fail the trial
    and queue its retry. Worker B resumes the retry, finishes it, starts trial 1 and is killed in
    its epoch 3; its newest checkpoint is then truncated. Worker C must fall back to the previous
    checkpoint and finish the study. A third trial keeps a fresh one for B when trial 0 ends before
    its MLflow run is recorded (a loaded machine: a worker's first run waits for MLflow's import),
    and A is killed in trial 1 instead.
    """
    work = tmp_path_factory.mktemp("killed")
    project, logs = work / "project", work / "logs"
    logs.mkdir()
    with fresh_database(pg_server) as url:
        where = ["--storage", url, "--project-dir", str(project)]
        follower = spawn(["start", "--study", str(SLEEP_STUDY), "--name", "killed", "--trials", "3", "--workers", "0",
                           *FAST, "--study-option", "epochs=8", "--study-option", "epoch_seconds=0.6", *where],
                          work, logs / "start.log")  # fmt: skip
        workers: list[subprocess.Popen[bytes]] = []

        def worker(tag: str) -> subprocess.Popen[bytes]:
            workers.append(spawn(["worker", "--name", "killed", *where], work, logs / f"worker-{tag}.log"))
            return workers[-1]

        try:
            watch = StudyWatch(url, "killed")
            a = worker("a")
            # Runs of dead attempts are tested below: each is killed once its run exists.
            first = wait_for(lambda: watch.running_at(3, with_run=True), 120, "trial 0 to reach epoch 3")
            stop(a)
            killed_at = time.monotonic()
            first_ckpt = newest_epoch(project / "checkpoints" / "killed" / f"trial-{first.number}")
            wait_for(lambda: watch.trial(first.number).state.name == "FAIL", 30, "the dead trial to be failed")
            reaped_after = time.monotonic() - killed_at
            waiting = [t for t in watch.trials() if t.state.name == "WAITING"]

            b = worker("b")
            second = wait_for(lambda: watch.running_at(3, with_run=True), 120, "the second trial to reach epoch 3")
            stop(b)
            second_dir = project / "checkpoints" / "killed" / f"trial-{logical(second)}"
            second_ckpt = newest_epoch(second_dir)
            damaged = second_dir / f"epoch-{second_ckpt:04d}.pt"
            with open(damaged, "r+b") as file:
                file.truncate(damaged.stat().st_size // 2)
            c = worker("c")
            code = follower.wait(timeout=180)
            c.wait(timeout=60)
            yield KilledStudy(
                trials=watch.trials(), first_dead=first.number, first_checkpoint=first_ckpt,
                reaped_after_s=reaped_after, waiting_before_any_worker=waiting, second_dead=second.number,
                second_checkpoint=second_ckpt, follower_code=code, last_worker_log=(logs / "worker-c.log").read_text(),
                project=project,
            )  # fmt: skip
        finally:
            stop(follower, *workers)


def _retry_of(study: KilledStudy, number: int) -> Any:
    return next(t for t in study.trials if t.system_attrs.get("failed_trial") == number and t.state.name != "FAIL")


@pytest.mark.postgres
@pytest.mark.slow
def test_the_follower_fails_a_dead_trial_within_the_grace_period(killed_study):
    # No worker was alive: the process following the study reaped it, not a worker asking for work.
    assert killed_study.reaped_after_s < GRACE_S + 5
    dead = next(t for t in killed_study.trials if t.number == killed_study.first_dead)
    assert dead.user_attrs["fail_reason"].startswith("worker lost")
    [waiting] = killed_study.waiting_before_any_worker
    assert waiting.system_attrs["failed_trial"] == dead.number
    assert waiting.params == dead.params


@pytest.mark.postgres
@pytest.mark.slow
def test_the_retry_resumes_after_the_last_checkpoint_and_continues_the_curve(killed_study):
    retry = _retry_of(killed_study, killed_study.first_dead)
    assert retry.state.name == "COMPLETE"
    assert killed_study.first_checkpoint >= 3
    assert retry.user_attrs["resumed_from_epoch"] == killed_study.first_checkpoint
    # The pruner sees one curve: the dead attempt's reports carried over, the retry's follow them
    # (an attempt killed between writing a checkpoint and reporting its epoch leaves that one to the
    # retry, which reports it from the checkpoint when it finishes).
    assert set(range(1, 9)) <= set(retry.intermediate_values)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_truncated_checkpoint_falls_back_to_the_previous_one_with_a_warning(killed_study):
    retry = _retry_of(killed_study, killed_study.second_dead)
    assert retry.state.name == "COMPLETE"
    assert retry.user_attrs["resumed_from_epoch"] == killed_study.second_checkpoint - 1
    assert "skipping checkpoint" in killed_study.last_worker_log
    assert f"epoch-{killed_study.second_checkpoint:04d}.pt is truncated or corrupt" in killed_study.last_worker_log


@pytest.mark.postgres
@pytest.mark.slow
def test_dead_attempts_end_killed_in_mlflow_and_their_retries_link_to_them(killed_study):
    runs = mlflow_runs(killed_study.project)
    for dead_number in (killed_study.first_dead, killed_study.second_dead):
        dead = next(t for t in killed_study.trials if t.number == dead_number)
        retry = _retry_of(killed_study, dead_number)
        dead_run, retry_run = runs[dead.user_attrs["mlflow_run_id"]], runs[retry.user_attrs["mlflow_run_id"]]
        assert dead_run.info.status == "KILLED"
        assert retry_run.info.status == "FINISHED"
        assert retry_run.data.tags["hpsearch.retry_of"] == dead_run.info.run_id


@pytest.mark.postgres
@pytest.mark.slow
def test_killed_workers_cost_no_trial_and_leave_nothing_running(killed_study):
    assert killed_study.follower_code == 0
    assert_exact_budget(killed_study.trials, 3)
    failed = [t for t in killed_study.trials if t.state.name == "FAIL"]
    assert sorted(t.number for t in failed) == sorted([killed_study.first_dead, killed_study.second_dead])


@pytest.mark.slow
def test_a_running_trial_heartbeat_reaps_dead_trials(tmp_path):
    """While every live worker is busy training, its heartbeat thread still fails dead trials."""
    from search.api import StartOptions, prepare
    from search.coordination import Coordinator, keep_alive
    from search.settings import SearchSettings

    record = prepare(
        StartOptions(study=str(SLEEP_STUDY), trials=3, settings=SearchSettings(heartbeat_interval=1, grace_period=2))
    ).record
    coordinator = Coordinator(f"sqlite:///{tmp_path}/optuna.db", "reap")
    study, _ = coordinator.create_or_resume(record, 3)
    dead, _ = coordinator.claim(study)
    dead.suggest_float("x", -2.0, 2.0)
    dead.report(0.5, 1)
    time.sleep(3.0)  # no heartbeat for longer than the grace period
    live = study.ask()  # not claimed: a claim would reap the dead trial itself
    coordinator.storage.record_heartbeat(live._trial_id)
    stop = threading.Event()
    beating = threading.Thread(target=keep_alive, args=(coordinator, study, live, stop))
    beating.start()
    try:
        wait_for(lambda: coordinator.storage.get_trial(dead._trial_id).state.name == "FAIL", 10, "the reap")
        coordinator.reap(study)  # a second reaper finds nothing more to do
    finally:
        stop.set()
        beating.join()
    trials = study.get_trials(deepcopy=False)
    [retry] = [t for t in trials if t.state.name == "WAITING"]
    assert retry.system_attrs["failed_trial"] == dead.number
    assert retry.params == {"x": dead.params["x"]} and retry.intermediate_values == {1: 0.5}
    assert coordinator.storage.get_trial(live._trial_id).state.name == "RUNNING"


@pytest.mark.parametrize(("every", "resumed", "unreported"), [(0, 3, 4), (0, 3, 3), (0, 3, 2), (30, 0, 4)],
                         ids=["every-epoch", "killed-before-reporting", "two-unreported", "every-30s"])  # fmt: skip
@pytest.mark.slow
def test_a_retry_resumed_after_the_last_epoch_completes_with_the_best_reported_value(
    claimed_sleep_trial, every, resumed, unreported
):
    """A worker that died after its trial's last epoch, before telling. With a checkpoint every epoch
    the retry resumes after the last one and trains nothing; with 30 s between checkpoints none was
    due in a trial this short (its last epoch is saved only when due, since a finished trial's
    checkpoints are deleted unread), so the retry trains it again: a loss within the bound. A worker
    killed between writing the last checkpoint and reporting its epoch leaves that epoch to the retry,
    which reports it from the checkpoint; so does one that stored none of several epochs its checkpoint
    holds (epochs shorter than the store's interval, and a checkpoint by time)."""
    from search.execution._pruning import PruningHook
    from search.execution._trial import _fit, run_trial
    from search.settings import SearchSettings

    class KilledBeforeTheLastReport(PruningHook):
        def __call__(self, epoch: int, metrics: Any) -> bool:
            return False if epoch >= unreported else super().__call__(epoch, metrics)

    settings = SearchSettings(heartbeat_interval=1, grace_period=2, pruner="none", checkpoint_every=every)
    ctx, dead = claimed_sleep_trial(settings)
    run = ctx.tracker.start_child(ctx.experiment_id, ctx.parent_run_id, "dead", "trial", {})
    dead.set_user_attr("mlflow_run_id", run.run_id)
    hook = KilledBeforeTheLastReport(dead, "val_loss", ctx.pruner_trials)
    _fit(ctx, dead, run, ctx.checkpoint_root / "sleep" / f"trial-{dead.number}", hook)  # all 3 epochs, then "dies"
    reported = ctx.coordinator.storage.get_trial(dead._trial_id).intermediate_values
    time.sleep(3.0)
    [reaped] = ctx.coordinator.reap(ctx.optuna_study)
    retry, _ = ctx.coordinator.claim(ctx.optuna_study)
    outcome = run_trial(ctx, retry)
    finished = ctx.coordinator.storage.get_trial(retry._trial_id)
    assert reaped.number == dead.number and finished.system_attrs["failed_trial"] == dead.number
    assert finished.user_attrs["resumed_from_epoch"] == resumed
    if unreported <= 3:  # the dead attempt stored the epochs before; the retry added the rest from its checkpoint
        assert sorted(reported) == list(range(1, unreported)) and sorted(finished.intermediate_values) == [1, 2, 3]
        assert finished.intermediate_values[3] == finished.user_attrs["final_metrics"]["val_loss"]
        assert finished.intermediate_values[2] != finished.intermediate_values[3]  # its own epoch's, not a copy
    elif resumed:  # its values were stored with the checkpoint that holds them
        assert sorted(reported) == [1, 2, 3] and finished.value == min(reported.values())
    else:  # nothing was stored: the dead attempt's values came with no checkpoint, nor a tell
        assert reported == {} and finished.user_attrs["epochs_run"] == 3
    assert outcome.state == "COMPLETE" and finished.value == min(finished.intermediate_values.values())


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.slow
def test_a_tell_that_lands_between_the_reapers_read_and_write_costs_nothing(tmp_path, backend, request):
    """The worker was only slow: its trial finishes while a reaper is failing it. The reaper must
    neither crash nor leave a retry that would train the same logical trial again."""
    from optuna.trial import TrialState

    from search.api import StartOptions, prepare
    from search.coordination import Coordinator
    from search.settings import SearchSettings

    url = request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/optuna.db"
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=2,
                                  settings=SearchSettings(heartbeat_interval=1, grace_period=2))).record  # fmt: skip
    coordinator = Coordinator(url, "race")
    study, _ = coordinator.create_or_resume(record, 2)
    slow, _ = coordinator.claim(study)
    slow.suggest_float("x", -2.0, 2.0)
    slow.report(0.5, 1)
    time.sleep(3.0)  # looks dead to the reaper

    storage = coordinator.storage
    original = storage.set_trial_user_attr

    def tell_lands_first(trial_id: int, key: str, value: Any) -> None:
        if trial_id == slow._trial_id and key == "fail_reason":
            study.tell(slow, 0.25)  # the worker's tell, between the reaper's read and its first write
        original(trial_id, key, value)

    storage.set_trial_user_attr = tell_lands_first  # type: ignore[method-assign]
    try:
        reaped = coordinator.reap(study)  # must not raise
    finally:
        storage.set_trial_user_attr = original  # type: ignore[method-assign]
    assert reaped == []
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    assert trials[slow.number].state == TrialState.COMPLETE and trials[slow.number].value == 0.25
    others = [t for t in trials.values() if t.number != slow.number]
    assert all(t.state == TrialState.FAIL for t in others)  # the retry queued for it is cancelled, not WAITING
    assert coordinator.counts().finished_logical == 1
