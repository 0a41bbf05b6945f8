"""Continuations (a paused trial's resumption, a replaced trial's copy) and the retries of them."""

from __future__ import annotations

import optuna
import pytest

import storage
from search.coordination import RetryDeadTrial, queue_continuation


def _study(tmp_path):
    url = storage.sqlite_url(tmp_path / "optuna.db")
    study = optuna.create_study(storage=url, study_name="s")
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    return study, dist, optuna.storages.RDBStorage(url)


def test_a_retry_of_a_continuation_does_not_count_as_another_continuation(tmp_path):
    """A dead resumption's retry continues the same logical trial, but resumed nothing itself: the
    counts would otherwise take one paused attempt for two and report pruned trials one short."""
    study, dist, rdb = _study(tmp_path)
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, params={"x": 0.5},
                                              distributions=dist, intermediate_values={1: 1.0},
                                              user_attrs={"paused_at": 1}))  # fmt: skip
    paused = study.get_trials()[0]
    resumed_id = queue_continuation(rdb, study, paused, {"resumed_from": paused.number})
    assert resumed_id is not None
    rdb.set_trial_state_values(resumed_id, optuna.trial.TrialState.RUNNING)
    resumed = rdb.get_trial(resumed_id)
    retry_id = RetryDeadTrial(rdb, 1).queue(study, resumed)  # its worker died
    retry = rdb.get_trial(retry_id)
    assert "resumed_from" not in retry.user_attrs and retry.system_attrs["failed_trial"] == 0
    assert retry.system_attrs["retry_history"] == [0, resumed.number]
    counts = storage.count_trials(rdb.engine, storage.study_id(study))
    assert (counts.resumed, counts.paused_attempts, counts.logical) == (1, 1, 1)


def test_a_continuation_spends_no_retry(tmp_path):
    """A logical trial with its one retry spent (--max-retries 1) may still be resumed."""
    study, dist, rdb = _study(tmp_path)
    rdb.heartbeat_stale_trial_callback = RetryDeadTrial(rdb, 1)
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, params={"x": 0.5},
                                              distributions=dist, intermediate_values={1: 1.0},
                                              system_attrs={"failed_trial": 0, "retry_history": [5],
                                                            "free_retries": []}))  # fmt: skip
    attempt = study.get_trials()[0]
    assert RetryDeadTrial(rdb, 1).queue(study, attempt) is None  # a second retry: refused
    assert queue_continuation(rdb, study, attempt, {"resumed_from": attempt.number}) is not None


def test_status_counts_what_paused_trials_keep_on_disk(tmp_path):
    from search.api._results import paused_checkpoints
    from search.coordination import Coordinator

    study, dist, rdb = _study(tmp_path)
    for number, paused in ((0, True), (1, False), (2, True)):
        attrs = {"paused_at": 1} if paused else {}
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, params={"x": 0.5},
                                                  distributions=dist, intermediate_values={1: 1.0},
                                                  user_attrs=attrs))  # fmt: skip
        folder = tmp_path / "ckpt" / "s" / f"trial-{number}"
        folder.mkdir(parents=True)
        (folder / "epoch-0001.pt").write_bytes(b"x" * (1000 + number))
    queue_continuation(rdb, study, study.get_trials()[2], {"resumed_from": 2})  # resumed: not paused any more
    coordinator = Coordinator(storage.sqlite_url(tmp_path / "optuna.db"), "s")
    assert paused_checkpoints(coordinator, tmp_path / "ckpt") == (1, 1000)


@pytest.mark.timeout(30)  # before the fix it waited forever
def test_search_start_stops_waiting_for_a_resumption_no_worker_takes(monkeypatch, caplog):
    """All trials ended but a paused one the rule would resume, and no worker can (its checkpoint is
    nowhere one looks): the follower ends the study after NOBODY_S instead of waiting forever."""
    from types import SimpleNamespace

    import search.api._follow as follow

    done = SimpleNamespace(done=lambda budget: True, state=lambda name: 0)
    coordinator = SimpleNamespace(load=lambda: None, reap=lambda study: [], counts=lambda: done, budget=lambda: 4)
    monkeypatch.setattr(follow, "study_finished", lambda coordinator, study: False)
    monkeypatch.setattr(follow, "NOBODY_S", 0.2)
    assert follow.follow_until_done(coordinator, lambda: None, poll=0.05) is True
    assert "no worker resumed it" in caplog.text
    monkeypatch.setattr(follow, "study_finished", lambda coordinator, study: True)
    assert follow.follow_until_done(coordinator, lambda: None, poll=0.05) is True  # at once


def _earned_resumption(tmp_path, budget: int):
    """A freeze-thaw study (``asha:min=1,factor=2``) of 4 trials whose trial 0 is paused at rung 1 in its
    top half: it has earned its resumption. The coordinator, the study and its record."""
    from pathlib import Path

    from search.coordination import Coordinator
    from search.settings import SearchSettings, StudyRecord

    ranked = Path(__file__).resolve().parents[1] / "data" / "ranked_study.py"
    record = StudyRecord(study_ref=str(ranked), metric="val_loss", direction="minimize", search_epochs=4,
                         settings=SearchSettings(pruner="asha:min=1,factor=2"))  # fmt: skip
    coordinator = Coordinator(storage.sqlite_url(tmp_path / "optuna.db"), "s")
    study, _ = coordinator.create_or_resume(record, budget=budget)
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for number, x in enumerate((0.1, 0.5, 0.7, 0.9)):
        state = optuna.trial.TrialState.PRUNED if number == 0 else optuna.trial.TrialState.COMPLETE
        study.add_trial(optuna.trial.create_trial(state=state, params={"x": x}, distributions=dist,
                                                  value=None if number == 0 else x, intermediate_values={1: x},
                                                  user_attrs={"paused_at": 1} if number == 0 else {}))  # fmt: skip
    return coordinator, study, record


@pytest.mark.timeout(60)  # before the fix `search follow` waited forever
def test_search_follow_says_no_worker_takes_an_earned_resumption_and_ends(tmp_path):
    """After `search start` was stopped (Ctrl-C), the trials left are done but for a paused one that
    has earned its resumption: the view says so, naming it, instead of waiting forever."""
    from search.api._follow import follow_view
    from search.observation import PlainFollower

    coordinator, study, _ = _earned_resumption(tmp_path, budget=4)
    follower = PlainFollower(coordinator, quiet=True)
    said = follow_view(coordinator, follower, interval=0.05, nobody_s=0.3)
    assert said is not None and said.startswith("trial 0 (paused at epoch 1) has earned its resumption, but no worker")
    assert "`search worker --name s` resumes it" in said
    resumed = queue_continuation(coordinator.storage, study, study.get_trials()[0], {"resumed_from": 0})
    coordinator.storage.set_trial_state_values(resumed, optuna.trial.TrialState.RUNNING)
    coordinator.storage.set_trial_state_values(resumed, optuna.trial.TrialState.COMPLETE, [0.1])
    assert follow_view(coordinator, follower, interval=0.05, nobody_s=0.3) is None  # resumed: the study is over


def test_no_paused_trial_resumes_once_the_search_ended_early(tmp_path):
    """After --timeout, --stop-at or --epoch-budget no trial starts again: a paused one that earned its
    resumption stays paused, and the study is over once the running trials finish; in a new run of
    the search (the stop cleared) the rule applies again."""
    from search.coordination import resumable, stop_new_trials, study_finished

    coordinator, _, record = _earned_resumption(tmp_path, budget=8)
    coordinator.can_resume = lambda number: True
    study = coordinator.load()
    assert resumable(coordinator, study, spent=True) is not None  # before the stop: a worker would resume it
    stop_new_trials(coordinator, "--timeout 1 s passed")
    assert resumable(coordinator, study, spent=True) is None and study_finished(coordinator, study)
    trial, _ = coordinator.claim(study)
    assert trial is None and len(study.get_trials()) == 4
    study, created = coordinator.create_or_resume(record, budget=8)  # the same command again: a new run
    assert not created and resumable(coordinator, study, spent=True) is not None
