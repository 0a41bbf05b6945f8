"""Ctrl-C racing a reaper: the interrupted trial is resumed exactly once, whoever writes first."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_ctrl_c_between_the_reapers_read_and_write_resumes_the_trial_exactly_once(tmp_path, backend, request):
    from optuna.trial import TrialState

    from search.cli import StartOptions, prepare
    from search.coordination import Coordinator
    from search.execution import interrupt_running
    from search.settings import SearchSettings

    url = request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/optuna.db"
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=2,
                                  settings=SearchSettings(heartbeat_interval=1, grace_period=2))).record  # fmt: skip
    coordinator = Coordinator(url, "ctrl-c")
    study, _ = coordinator.create_or_resume(record, 2)
    slow, _ = coordinator.claim(study)
    slow.set_user_attr("worker", "w0")
    slow.report(0.5, 1)
    time.sleep(3.0)  # a long pause (a swapped-out node): it looks dead to the reaper
    ctx = SimpleNamespace(coordinator=coordinator, optuna_study=study, worker_id="w0",
                          tracker=SimpleNamespace(mark_killed=lambda run_id: None))  # fmt: skip

    storage = coordinator.storage
    original = storage.set_trial_user_attr

    def ctrl_c_lands_first(trial_id: int, key: str, value: Any) -> None:
        if trial_id == slow._trial_id and key == "fail_reason" and str(value).startswith("worker lost"):
            interrupt_running(ctx)  # the user's Ctrl-C, after the reaper queued a retry, before its write
        original(trial_id, key, value)

    storage.set_trial_user_attr = ctrl_c_lands_first  # type: ignore[method-assign]
    try:
        coordinator.reap(study)  # must not raise
    finally:
        storage.set_trial_user_attr = original  # type: ignore[method-assign]
    trials = study.get_trials(deepcopy=False)
    assert trials[0].state == TrialState.FAIL and trials[0].user_attrs["fail_reason"] == "interrupted"
    retries = [t for t in trials[1:] if t.system_attrs.get("failed_trial") == slow.number]
    assert [t.state for t in retries] == [TrialState.WAITING]  # resumed once: not zero, not twice
    assert retries[0].intermediate_values == {1: 0.5}


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_two_processes_that_queue_the_same_retry_at_once_leave_one(tmp_path, backend, request, monkeypatch):
    """A reaper and an interrupt that both pass the "has it a retry yet?" look before either writes."""
    from optuna.trial import TrialState

    import storage as st
    from search.cli import StartOptions, prepare
    from search.coordination import Coordinator
    from search.coordination import _reaper as reaper
    from search.settings import SearchSettings

    url = request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/optuna.db"
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=2, settings=SearchSettings())).record
    coordinator = Coordinator(url, "twice")
    study, _ = coordinator.create_or_resume(record, 2)
    trial, _ = coordinator.claim(study)
    frozen = coordinator.storage.get_trial(trial._trial_id)
    monkeypatch.setattr(reaper.st, "retried_trial_numbers", lambda *args: set())  # both looked: none yet
    callback = coordinator.storage.heartbeat_stale_trial_callback
    first, second = callback.queue(study, frozen), callback.queue(study, frozen)
    monkeypatch.setattr(reaper.st, "retried_trial_numbers", st.retried_trial_numbers)
    assert first is not None and second is None
    retries = [t for t in study.get_trials(deepcopy=False) if t.system_attrs.get("failed_trial") == trial.number]
    assert [(t._trial_id, t.state) for t in retries] == [(first, TrialState.WAITING), (first + 1, TrialState.FAIL)]
    assert retries[1].user_attrs["fail_reason"] == f"not needed: trial {trial.number} has a retry"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_trial_its_worker_failed_for_good_between_the_reapers_read_and_write_gets_no_retry(tmp_path, backend,
                                                                                             request):  # fmt: skip
    """Unlike an interrupt, a real failure (a bug in the study) is final: the reaper's retry stands down."""
    from optuna.trial import TrialState

    from search.cli import StartOptions, prepare
    from search.coordination import Coordinator
    from search.settings import SearchSettings

    url = request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/optuna.db"
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=2,
                                  settings=SearchSettings(heartbeat_interval=1, grace_period=2))).record  # fmt: skip
    coordinator = Coordinator(url, "bug")
    study, _ = coordinator.create_or_resume(record, 2)
    slow, _ = coordinator.claim(study)
    time.sleep(3.0)
    storage = coordinator.storage
    original = storage.set_trial_user_attr

    def the_worker_fails_it_first(trial_id: int, key: str, value: Any) -> None:
        if trial_id == slow._trial_id and key == "fail_reason" and str(value).startswith("worker lost"):
            original(trial_id, "fail_reason", "ValueError: a bug")
            storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
        original(trial_id, key, value)

    storage.set_trial_user_attr = the_worker_fails_it_first  # type: ignore[method-assign]
    try:
        assert coordinator.reap(study) == []
    finally:
        storage.set_trial_user_attr = original  # type: ignore[method-assign]
    trials = study.get_trials(deepcopy=False)
    assert trials[0].user_attrs["fail_reason"] == "ValueError: a bug"
    assert [t.state for t in trials[1:]] == [TrialState.FAIL]  # the retry stood down
