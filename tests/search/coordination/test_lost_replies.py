"""A write whose reply is lost may have committed: what is trained must be what is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"


def _lost_connection() -> Exception:
    from sqlalchemy.exc import OperationalError

    return OperationalError("UPDATE", {}, Exception("server closed the connection unexpectedly"))


@pytest.mark.parametrize("committed", [True, False], ids=["reply-lost", "write-lost"])
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_lost_reply_after_a_suggestion_never_trains_other_params_than_stored(tmp_path, backend, committed, request,
                                                                               monkeypatch):  # fmt: skip
    """A trial's params are stored in one transaction; the connection drops at its commit, after it
    (reply lost) or before (write lost). The retry trains exactly what is stored, stored once."""
    import storage as st
    from search.api import StartOptions, prepare
    from search.coordination import Coordinator, _resilience
    from search.execution._suggest import suggest_params
    from search.settings import SearchSettings, load_study

    monkeypatch.setattr(_resilience, "OUTAGE", _resilience._Outage())
    url = request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/optuna.db"
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=2, settings=SearchSettings())).record
    coordinator = Coordinator(url, "lost-reply")
    optuna_study, _ = coordinator.create_or_resume(record, 2)
    trial, _ = coordinator.claim(optuna_study)
    store = st.set_trial_params
    writes: list[list[str]] = []

    def drop_the_first_commit(storage, trial_id, params) -> None:
        writes.append([name for name, _, _ in params])
        if len(writes) == 1:
            if committed:
                store(storage, trial_id, params)
            raise _lost_connection()
        store(storage, trial_id, params)

    monkeypatch.setattr(st, "set_trial_params", drop_the_first_commit)
    study = load_study(record.study_ref, record.options, record.narrow)
    params = suggest_params(study, coordinator.storage, trial)
    stored = coordinator.storage.get_trial(trial._trial_id).params
    assert writes[0] == ["x", "lr"]  # both params in one write, which was lost, then retried
    assert writes[1] == ([] if committed else ["x", "lr"])  # a committed write is read back, not redone
    assert {"x": params.x, "lr": params.lr} == stored


def test_a_trial_taken_over_before_its_run_id_was_stored_leaves_no_run_running(claimed_sleep_trial):
    """Frozen (SIGSTOP) between creating its MLflow run and storing the run's id on the trial: the
    trial was reaped meanwhile, with no run to end. The worker ends the run it made when it wakes."""
    from optuna.trial import TrialState

    from search.execution._trial import run_trial

    ctx, trial = claimed_sleep_trial()
    created = []
    create_run = ctx.tracker.client.create_run

    def reaped_right_after(*args, **kwargs):
        run = create_run(*args, **kwargs)
        created.append(run.info.run_id)
        ctx.coordinator.storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)  # the reaper
        return run

    ctx.tracker.client.create_run = reaped_right_after
    outcome = run_trial(ctx, trial)
    assert outcome.state == "LOST"
    [run_id] = created
    assert ctx.tracker.client.get_run(run_id).info.status == "KILLED"


@pytest.mark.parametrize("finisher", ["this-worker", "a-reaper"])
def test_a_lost_reply_to_the_final_tell_finishes_the_trial_once(claimed_sleep_trial, monkeypatch, finisher):
    """The trial's final state, value and attributes are one write; its reply is lost. The retry
    finds the trial finished: by that write (the trial is this worker's, COMPLETE, attributes and
    value stored once) or by a reaper in between (the trial is lost to its retry)."""
    from optuna.trial import TrialState

    from search.coordination import _resilience
    from search.execution import _finish
    from search.execution._trial import run_trial

    monkeypatch.setattr(_resilience, "OUTAGE", _resilience._Outage())
    ctx, trial = claimed_sleep_trial()
    real = _finish.finish_trial
    calls = []

    def reply_lost(storage, trial_id, state, value, attrs, before_write, steps, *system):
        calls.append(state)
        if len(calls) == 1:
            if finisher == "this-worker":
                real(storage, trial_id, state, value, attrs, before_write, steps, *system)
            else:
                storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
            raise _lost_connection()
        return real(storage, trial_id, state, value, attrs, before_write, steps, *system)

    monkeypatch.setattr(_finish, "finish_trial", reply_lost)
    outcome = run_trial(ctx, trial)
    stored = ctx.coordinator.storage.get_trial(trial._trial_id)
    assert calls == [TrialState.COMPLETE, TrialState.COMPLETE]
    if finisher == "this-worker":
        assert (outcome.state, stored.state, stored.value) == ("COMPLETE", TrialState.COMPLETE, outcome.value)
        assert stored.user_attrs["epochs_run"] == 3 and "cpu_seconds" in stored.user_attrs
        assert sorted(stored.intermediate_values) == [1, 2, 3]  # those held back were stored with the tell
    else:
        assert (outcome.state, stored.state) == ("LOST", TrialState.FAIL)
        assert "epochs_run" not in stored.user_attrs
