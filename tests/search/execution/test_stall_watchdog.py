"""A trial whose training hangs while its heartbeat goes on: failed as stalled, retried, and the search ends.

The stalling study (``data/stalling_study.py``) hangs its first trial for good, in the model's
forward or in the data loader before the first step; its heartbeat thread keeps beating, so no
reaper ever takes it for dead. Without a progress watchdog the trial stays RUNNING and
``search start`` never ends: every test here runs under a timeout and fails instead.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

STALLING_STUDY = Path(__file__).resolve().parents[1] / "data" / "stalling_study.py"
REASON = "stalled: no training step or validation batch finished for "
EXIT_STALLED = 70

# Alone when the suite runs on two processes: stall limits of a few seconds assume an idle machine
# (beside another file, a retry's first step once took longer and was failed as stalled too).
pytestmark = pytest.mark.exclusive


def _trials(url: str, name: str = "stalling") -> list[Any]:
    import optuna

    return sorted(optuna.load_study(study_name=name, storage=url).get_trials(), key=lambda t: t.number)


def _runs(project: Path) -> dict[str, Any]:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return {r.info.run_id: r for r in client.search_runs(experiments, max_results=500)}


def _logical(trial: Any) -> int:
    return int(trial.system_attrs.get("failed_trial", trial.number))


def _assert_stalled_and_retried(trials: list[Any], project: Path, limit: int) -> None:
    """Trial 0 failed as stalled, its retry and every other trial completed, nothing left running."""
    hung = trials[0]
    assert hung.state.name == "FAIL", [(t.number, t.state.name, t.user_attrs.get("fail_reason")) for t in trials]
    reason = hung.user_attrs["fail_reason"]
    assert reason.startswith(REASON) and reason.endswith(f" s (--stall-timeout {limit})"), reason
    assert [t.number for t in trials if t.state.name in ("RUNNING", "WAITING")] == []
    retries = [t for t in trials if "failed_trial" in t.system_attrs]
    assert [(_logical(t), t.state.name) for t in retries] == [(0, "COMPLETE")]
    assert all(t.state.name == "COMPLETE" for t in trials[1:]), [(t.number, t.state.name) for t in trials]
    runs = _runs(project)
    hung_run = runs[hung.user_attrs["mlflow_run_id"]]
    assert hung_run.info.status == "FAILED"
    assert hung_run.data.tags["hpsearch.fail_reason"] == reason
    assert hung_run.data.tags["hpsearch.state"] == "FAIL"
    trial_runs = [r for r in runs.values() if "hpsearch.trial" in r.data.tags]
    assert [r.info.run_name for r in trial_runs if r.info.status == "RUNNING"] == []
    retry_run = runs[retries[0].user_attrs["mlflow_run_id"]]
    assert retry_run.data.tags["hpsearch.retry_of"] == hung_run.info.run_id
    assert hung_run.info.status == "FAILED"  # the retry's start leaves a FAILED attempt as it is


@pytest.mark.slow
@pytest.mark.postgres
def test_a_training_thread_hung_in_forward_is_failed_as_stalled_and_search_start_ends(cli, tmp_path, pg_url):
    """One local worker: it fails the hung trial, queues its retry and exits 70; `search start` starts a
    fresh worker, which runs the retry. Its validation (3 batches of 2 s) is longer than the 5 s limit
    but never 5 s without a finished batch: the retry completes. On PostgreSQL only:
    the watchdog's calls are the same on SQLite, which the tests above use, and this one takes 20 s."""
    project, marker = tmp_path / "project", tmp_path / "hung-once"
    started = time.monotonic()
    proc = cli("start", "--study", str(STALLING_STUDY), "--trials", "1", "--workers", "1", "--stall-timeout", "5",
               "--heartbeat-interval", "1", "--grace-period", "600", "--pruner", "none", "--no-retrain",
               "--study-option", f"marker={marker}", "--study-option", "val_seconds=2", "--study-option",
               "val_batches=3", "--storage", pg_url, "--project-dir", str(project), cwd=tmp_path,
               timeout=300)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert marker.exists()
    assert "1/1 trials finished (1 complete, 0 pruned, 0 failed)" in proc.stdout, output
    assert f"worker 0 ended after failing a stalled trial (exit code {EXIT_STALLED}); starting a fresh one" in output
    _assert_stalled_and_retried(_trials(pg_url), project, limit=5)
    log = (project / "logs" / "worker-0.log").read_text()
    assert f"ending this worker (exit code {EXIT_STALLED})" in log and "queued its retry" in log
    # The reaper never took it for dead (grace period 600 s): the watchdog did, within seconds.
    assert "stopped heartbeating" not in log + output
    assert time.monotonic() - started < 240


def _create(tmp_path: Path, hang: str, **options: Any) -> tuple[Any, Any]:
    """A SQLite study of the stalling study, created as `search start` does, with its stored settings."""
    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.settings import SearchSettings

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path / "project")
    study_options = {"marker": str(tmp_path / "hung-once"), "hang": hang, **options}
    settings = SearchSettings(pruner="none", heartbeat_interval=1, grace_period=600)  # stall_timeout: the default
    opts = StartOptions(study=str(STALLING_STUDY), trials=1, settings=settings, study_options=study_options)
    coordinator, _ = create_or_resume(loc, prepare(opts), 1)
    return loc, coordinator


@pytest.mark.slow
def test_a_loader_hung_before_the_first_step_ends_its_worker_with_exit_code_70(cli, tmp_path):
    """`search worker --stall-timeout` (over the study's 30 minutes): the data loader hangs before the first
    step; the worker fails the trial, queues its retry and exits 70; the next worker completes the retry."""
    loc, _ = _create(tmp_path, hang="loader")
    where = ["--name", "stalling", "--project-dir", str(loc.project_dir)]
    first = cli("worker", "--stall-timeout", "3", *where, cwd=tmp_path, timeout=180)
    assert first.returncode == EXIT_STALLED, first.stdout + first.stderr
    lines = [line for line in first.stderr.splitlines() if "stalled" in line]
    assert any("trial 0 stalled: no training step or validation batch finished for" in line for line in lines), lines
    trials = _trials(loc.storage_url)
    assert [(t.number, t.state.name) for t in trials] == [(0, "FAIL"), (1, "WAITING")]
    second = cli("worker", "--stall-timeout", "3", *where, cwd=tmp_path, timeout=180)
    assert second.returncode == 0, second.stdout + second.stderr
    _assert_stalled_and_retried(_trials(loc.storage_url), loc.project_dir, limit=3)


@pytest.mark.slow
def test_a_stalled_worker_ends_its_hung_dataloader_processes_before_it_exits(tmp_path):
    """The loader hangs in its two DataLoader processes, which never look whether their parent is
    still there: the worker that fails the trial as stalled ends them before it exits 70."""
    import os
    import subprocess
    import sys

    import psutil

    loc, _ = _create(tmp_path, hang="loader", rows=16, loader_workers=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")} | {"OMP_NUM_THREADS": "1"}
    worker = subprocess.Popen([sys.executable, "-m", "search", "worker", "--stall-timeout", "3", "--name", "stalling",
                               "--project-dir", str(loc.project_dir)], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    tree: list[Any] = []
    try:
        deadline = time.monotonic() + 120
        while len(tree) < 2 and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            tree = psutil.Process(worker.pid).children(recursive=True)
        assert len(tree) >= 2, "the DataLoader processes never started"
        assert worker.wait(timeout=120) == EXIT_STALLED
        time.sleep(1)
        left = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], f"processes of the stalled worker still running: {left}"
    finally:
        worker.kill() if worker.poll() is None else None
        for proc in tree:
            if proc.is_running():
                proc.kill()
    assert [(t.number, t.state.name) for t in _trials(loc.storage_url)] == [(0, "FAIL"), (1, "WAITING")]


@pytest.fixture
def claimed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """A worker's context (in this process) and the trial it claimed; a 1 s stall limit for this process."""
    from search.execution import ENV_STALL_TIMEOUT, connect

    loc, _ = _create(tmp_path, hang="none")
    monkeypatch.setenv(ENV_STALL_TIMEOUT, "1")
    ctx = connect(loc, "stalling", "test-worker")
    trial, _ = ctx.coordinator.claim(ctx.optuna_study)
    return ctx, trial


@pytest.mark.slow
def test_the_watchdog_fails_a_trial_without_progress_and_spares_one_that_progresses(claimed):
    from search.execution._watchdog import watchdog

    ctx, trial = claimed
    exits: list[int] = []
    with watchdog(ctx, trial, on_exit=exits.append) as progress:
        for _ in range(12):  # 3 s, with a finished step every 0.25 s
            time.sleep(0.25)
            progress.step()
        assert exits == []
        assert ctx.coordinator.storage.get_trial(trial._trial_id).state.name == "RUNNING"
        time.sleep(3)
    assert exits == [EXIT_STALLED]
    trials = ctx.optuna_study.get_trials()
    assert [(t.number, t.state.name) for t in trials] == [(0, "FAIL"), (1, "WAITING")]
    assert trials[0].user_attrs["fail_reason"].startswith(REASON)


def test_a_trial_told_before_the_watchdog_writes_is_left_as_told_and_gets_no_retry(claimed):
    from search.execution._watchdog import fail_stalled

    ctx, trial = claimed
    ctx.optuna_study.tell(trial, 0.5)
    assert fail_stalled(ctx, trial, "stalled: test") is None
    assert [(t.number, t.state.name) for t in ctx.optuna_study.get_trials()] == [(0, "COMPLETE")]
