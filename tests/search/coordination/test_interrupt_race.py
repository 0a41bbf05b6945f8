"""Ctrl-C racing a reaper: the interrupted trial is resumed exactly once, whoever writes first."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"


def _study(tmp_path: Path, backend: str, request: Any, name: str, trials: int, **settings: Any) -> tuple[Any, Any]:
    from search.api import StartOptions, prepare
    from search.coordination import Coordinator
    from search.settings import SearchSettings

    url = request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/optuna.db"
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=trials, settings=SearchSettings(**settings))).record
    coordinator = Coordinator(url, name)
    study, _ = coordinator.create_or_resume(record, trials)
    return coordinator, study


def _ctx(coordinator: Any, study: Any, worker: str) -> Any:
    return SimpleNamespace(coordinator=coordinator, optuna_study=study, worker_id=worker,
                           tracker=SimpleNamespace(mark_killed=lambda run_id: None))  # fmt: skip


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.slow
def test_ctrl_c_between_the_reapers_read_and_write_resumes_the_trial_exactly_once(tmp_path, backend, request):
    """The interrupt waits for the reaper's study lock, then finds the trial failed and retried: once."""
    from optuna.trial import TrialState

    from search.execution import interrupt_running

    coordinator, study = _study(tmp_path, backend, request, "ctrl-c", 2, heartbeat_interval=1, grace_period=2)
    slow, _ = coordinator.claim(study)
    slow.set_user_attr("worker", "w0")
    slow.report(0.5, 1)
    time.sleep(3.0)  # a long pause (a swapped-out node): it looks dead to the reaper
    storage = coordinator.storage
    original = storage.set_trial_user_attr
    interrupt = threading.Thread(target=interrupt_running, args=(_ctx(coordinator, study, "w0"),))

    def ctrl_c_lands_first(trial_id: int, key: str, value: Any) -> None:
        if trial_id == slow._trial_id and key == "fail_reason" and str(value).startswith("worker lost"):
            interrupt.start()  # the user's Ctrl-C, after the reaper queued a retry, before its write
            interrupt.join(1.0)
            assert interrupt.is_alive()  # waiting for the study lock
        original(trial_id, key, value)

    storage.set_trial_user_attr = ctrl_c_lands_first  # type: ignore[method-assign]
    try:
        coordinator.reap(study)  # must not raise
    finally:
        storage.set_trial_user_attr = original  # type: ignore[method-assign]
    interrupt.join(30)
    assert not interrupt.is_alive()
    trials = study.get_trials(deepcopy=False)
    assert trials[0].state == TrialState.FAIL and trials[0].user_attrs["fail_reason"].startswith("worker lost")
    retries = [t for t in trials[1:] if t.system_attrs.get("failed_trial") == slow.number]
    assert [t.state for t in retries] == [TrialState.WAITING]  # resumed once: not zero, not twice
    assert retries[0].intermediate_values == {1: 0.5}
    assert "fail_reason" not in retries[0].user_attrs


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_an_interrupted_trial_is_failed_and_retried_at_once_and_the_retry_starts_clean(tmp_path, backend, request):
    """Issue 46 item 10: a claim in the moment between the interrupted trial's failure and its
    retry's queueing found the logical trial finished and the budget spent; and the retry inherited
    ``fail_reason="interrupted"``. The claim now waits for the study lock and gets the retry."""
    from optuna.trial import TrialState

    from search.coordination import Coordinator
    from search.execution import interrupt_running

    coordinator, study = _study(tmp_path, backend, request, "interrupted", 1, heartbeat_interval=5, grace_period=60)
    trial, _ = coordinator.claim(study)
    trial.set_user_attr("worker", "w0")
    trial.report(0.25, 1)
    other = Coordinator(coordinator.url, "interrupted")  # another worker, with its own connections
    other_study = other.load()
    claimed: list[Any] = []
    claim = threading.Thread(target=lambda: claimed.append(other.claim(other_study)))
    storage = coordinator.storage
    original = storage.set_trial_state_values

    def a_claim_comes_in(trial_id: int, state: Any, values: Any = None) -> bool:
        done = original(trial_id, state, values)
        if trial_id == trial._trial_id and state == TrialState.FAIL:
            claim.start()
            claim.join(1.0)  # what it would have found had nothing held it back
        return done

    storage.set_trial_state_values = a_claim_comes_in  # type: ignore[method-assign]
    try:
        interrupt_running(_ctx(coordinator, study, "w0"))
    finally:
        storage.set_trial_state_values = original  # type: ignore[method-assign]
    claim.join(30)
    got, counts = claimed[0]
    assert got is not None, f"the claim found the study over: {counts}"
    retry = storage.get_trial(got._trial_id)
    assert retry.system_attrs["failed_trial"] == trial.number and retry.intermediate_values == {1: 0.25}
    assert "fail_reason" not in retry.user_attrs
    first = storage.get_trial(trial._trial_id)
    assert first.state == TrialState.FAIL and first.user_attrs["fail_reason"] == "interrupted"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_two_processes_that_queue_the_same_retry_at_once_leave_one(tmp_path, backend, request, monkeypatch):
    """A reaper and an interrupt that both pass the "has it a retry yet?" look before either writes."""
    from optuna.trial import TrialState

    import storage as st
    from search.api import StartOptions, prepare
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
@pytest.mark.slow
def test_a_trial_its_worker_failed_for_good_between_the_reapers_read_and_write_gets_no_retry(tmp_path, backend,
                                                                                             request):  # fmt: skip
    """Unlike an interrupt, a real failure (a bug in the study) is final: the reaper's retry stands down."""
    from optuna.trial import TrialState

    from search.api import StartOptions, prepare
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


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_ctrl_c_as_a_claim_makes_its_trial_running_leaves_no_trial_running(tmp_path, backend, request, monkeypatch):
    """Ctrl-C the moment a claim's trial has become RUNNING, before its worker has recorded itself on
    it (a paused trial's worker claiming its next, as `search start` was interrupted, left one so):
    the interrupt lands once the claim has noted the trial, and the worker queues that trial again."""
    import os
    import signal

    from optuna.trial import TrialState

    import storage as st
    from search.cli._commands import _interrupt_once
    from search.execution import interrupt_running

    coordinator, study = _study(tmp_path, backend, request, "claimed-ctrl-c", 2)

    def ctrl_c_after(create: Any) -> Any:
        def created(*args: Any) -> int:
            trial_id = create(*args)  # committed at once on SQLite; with the lock's transaction on PostgreSQL
            os.kill(os.getpid(), signal.SIGINT)
            return trial_id

        return created

    monkeypatch.setattr(st, "create_running_trial", ctrl_c_after(st.create_running_trial))
    storage = st.study_storage(study)
    monkeypatch.setattr(storage, "create_new_trial", ctrl_c_after(storage.create_new_trial))
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, _interrupt_once)  # as in `search worker`
    try:
        with pytest.raises(KeyboardInterrupt):
            coordinator.claim(study)
        interrupt_running(_ctx(coordinator, study, "w0"))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials if t.state == TrialState.RUNNING] == []
    if backend == "sqlite":  # committed: failed as interrupted, and queued again
        assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
        assert trials[0].user_attrs["fail_reason"] == "interrupted"
    else:  # the interrupt ended the lock's transaction before it committed: no trial
        assert trials == []


def test_interrupts_held_back_are_handled_once_as_the_body_ends_and_the_handlers_put_back():
    import os
    import signal

    from search.coordination._interrupts import interrupts_deferred

    seen: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        seen.append(signum)
        raise KeyboardInterrupt

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGHUP)}
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    after: list[str] = []
    try:
        with pytest.raises(KeyboardInterrupt), interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGHUP)  # ignored before: ignored still
            after.append("the body went on")
        assert after == ["the body went on"] and seen == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is handler and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
