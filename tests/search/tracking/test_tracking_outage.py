"""An MLflow outage is not a database outage: it has its own clock, and a heartbeat never waits for it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from http_helpers import free_port, serve_mlflow, stop_server

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"


@pytest.fixture
def fresh_outages(monkeypatch: pytest.MonkeyPatch) -> None:
    from search.coordination import _resilience

    monkeypatch.setattr(_resilience, "OUTAGE", _resilience._Outage())
    monkeypatch.setattr(_resilience, "TRACKING_OUTAGE", _resilience._Outage())


def _lost_connection() -> Exception:
    from sqlalchemy.exc import OperationalError

    return OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))


def test_successful_optuna_calls_do_not_reset_the_mlflow_outage_clock(monkeypatch, fresh_outages):
    """While MLflow is down, the main thread's (or the heartbeat's) Optuna calls keep succeeding: the
    MLflow call must still give up at the outage limit, not retry for ever."""
    from search.coordination import _resilience
    from search.exceptions import DatabaseUnavailableError

    monkeypatch.setenv(_resilience.ENV_OUTAGE_LIMIT, "0.2")
    real_sleep = time.sleep
    monkeypatch.setattr(_resilience.time, "sleep", lambda _s: real_sleep(0.01))  # short backoffs
    calls = []

    class DownTracking:
        def log_batch(self) -> None:
            calls.append(1)
            if len(calls) > 500:
                pytest.fail("the MLflow outage never reached its limit")
            _resilience.retrying(lambda: None, "recording a heartbeat")  # the database answers
            raise _lost_connection()

    client = _resilience.resilient(DownTracking(), "using MLflow", _resilience.TRACKING_OUTAGE)
    with pytest.raises(DatabaseUnavailableError, match="while using MLflow"):
        client.log_batch()
    assert _resilience.OUTAGE.since is None  # and the database's own clock never started


@pytest.mark.slow
def test_a_heartbeats_reaping_pass_never_waits_for_mlflow_to_end_a_dead_run(tmp_path):
    from search.api import StartOptions, prepare
    from search.coordination import Coordinator
    from search.settings import SearchSettings

    settings = SearchSettings(heartbeat_interval=1, grace_period=2)
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=2, settings=settings)).record
    coordinator = Coordinator(f"sqlite:///{tmp_path}/optuna.db", "hung-mlflow")
    study, _ = coordinator.create_or_resume(record, 2)
    dead, _ = coordinator.claim(study)
    time.sleep(3.5)  # it never beats again
    entered, release, ended = threading.Event(), threading.Event(), []

    def end_run_on_a_hung_server(trial) -> None:
        entered.set()
        release.wait(60)  # MLflow's own HTTP retries can take minutes
        ended.append(trial.number)

    coordinator.on_reaped = end_run_on_a_hung_server
    try:
        coordinator.reap_once(study)  # what the heartbeat thread runs between beats
        assert entered.wait(30)
        assert ended == []  # returned while the dead run's clean-up still hangs
    finally:
        release.set()
    deadline = time.monotonic() + 30
    while not ended and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ended == [dead.number]  # and the clean-up still happens
    assert study.get_trials(deepcopy=False)[0].state.name == "FAIL"


@pytest.mark.postgres
@pytest.mark.slow
def test_trials_keep_training_through_a_tracking_server_outage_and_none_is_reaped(pg_url, tmp_path):
    """The MLflow server the workers log to over HTTP stops for 12 s (four grace periods) mid-search:
    training goes on, no live worker's trial is taken for dead, and every run ends FINISHED."""
    import os
    import signal
    import subprocess
    import sys

    import optuna
    from mlflow import MlflowClient

    port, store = free_port(), tmp_path / "mlflow" / "mlflow.db"
    store.parent.mkdir()
    server = serve_mlflow(port, store, tmp_path / "mlflow.log")
    uri = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_") and k != "MLFLOW_TRACKING_URI"}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    with open(tmp_path / "start.log", "ab") as out:
        start = subprocess.Popen([sys.executable, "-m", "search", "start", "--study", str(SLEEP_STUDY), "--trials", "2",
                                  "--workers", "2", "--pruner", "none", "--patience", "off", "--no-retrain",
                                  "--heartbeat-interval", "1", "--grace-period", "3", "--study-option", "epochs=24",
                                  "--study-option", "epoch_seconds=1", "--storage", pg_url, "--tracking-uri", uri,
                                  "--project-dir", str(tmp_path / "project")], cwd=tmp_path, env=env, stdout=out,
                                 stderr=subprocess.STDOUT)  # fmt: skip
    storage = pg_url.replace("postgresql://", "postgresql+psycopg2://")

    def epochs_reported() -> int:
        try:
            trials = optuna.load_study(study_name="sleep", storage=storage).get_trials(deepcopy=False)
        except KeyError:
            return 0
        return sum(len(t.intermediate_values) for t in trials)

    try:
        deadline = time.monotonic() + 180
        while epochs_reported() < 2:
            assert time.monotonic() < deadline and start.poll() is None, (tmp_path / "start.log").read_text()
            time.sleep(0.5)
        os.killpg(server.pid, signal.SIGKILL)  # down at once (a stop under load takes seconds), as in a crash
        server.wait(timeout=60)
        before = epochs_reported()
        time.sleep(12)
        during = epochs_reported() - before
        server = serve_mlflow(port, store, tmp_path / "mlflow.log")
        assert start.wait(timeout=300) == 0, (tmp_path / "start.log").read_text()
        trials = optuna.load_study(study_name="sleep", storage=storage).get_trials(deepcopy=False)
        runs = MlflowClient(uri).search_runs(
            [MlflowClient(uri).get_experiment_by_name("sleep").experiment_id], max_results=100
        )
    finally:
        if start.poll() is None:
            start.kill()
        if server.poll() is None:
            stop_server(server)
    assert during >= 8, f"only {during} epochs reported in 12 s while MLflow was down"  # 2 workers at 1 s an epoch
    assert [t.state.name for t in trials] == ["COMPLETE"] * 2  # none reaped, none retried
    assert not [t for t in trials if "fail_reason" in t.user_attrs]
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3  # the parent and the two trials


def test_mlflows_sqlite_store_locked_by_a_frozen_worker_is_waited_out_not_a_failed_trial(
    monkeypatch, fresh_outages, caplog
):
    """A worker SIGSTOPped inside a write to the embedded MLflow store (SQLite) keeps it locked: the
    others' MLflow calls wait on the tracking clock (they failed their trials before). The Optuna
    database's own "database is locked" still propagates at once."""
    from search.coordination import _resilience

    monkeypatch.setattr(_resilience, "FIRST_DELAY_S", 0.01)
    calls = []

    def locked_twice() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError("MlflowException: (sqlite3.OperationalError) database is locked")
        return "written"

    assert _resilience.retrying(locked_twice, "logging to MLflow", _resilience.TRACKING_OUTAGE) == "written"
    assert len(calls) == 3
    assert "resume or end that process, or track to a server (--tracking-uri)" in caplog.text  # what to do
    calls.clear()
    with pytest.raises(RuntimeError, match="database is locked"):
        _resilience.retrying(locked_twice, "claiming a trial")  # Optuna's clock: not an outage
    assert len(calls) == 1
