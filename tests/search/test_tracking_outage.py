"""An MLflow outage is not a database outage: it has its own clock, and a heartbeat never waits for it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


def test_a_heartbeats_reaping_pass_never_waits_for_mlflow_to_end_a_dead_run(tmp_path):
    from search.cli import StartOptions, prepare
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
