"""A worker's copy of the study keeps running trials as read, for readers that need only their
params and states; readers that need their values (rung records, curves) read them every time."""

from __future__ import annotations

import optuna
import pytest

import storage
from search.settings import make_pruner, reads_running_trials


def _study(tmp_path) -> optuna.Study:
    return optuna.create_study(storage=optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db"))


def test_a_running_trial_with_params_is_read_once_unless_running_trials_are_asked_for(tmp_path) -> None:
    study = _study(tmp_path)
    other = study.ask()  # another worker's trial
    own = study.ask()
    copy = storage.StudyTrials(study._storage._backend, study._study_id)

    copy.report(own._trial_id, {}, refresh=True, running=False)
    assert copy.fetched == 1  # the other one, read without params
    other.suggest_float("x", 0.0, 1.0)
    copy.report(own._trial_id, {}, refresh=True, running=False)
    assert copy.fetched == 2  # read again: it had no params
    study._storage.set_trial_intermediate_value(other._trial_id, 1, 0.5)
    copy.report(own._trial_id, {1: 0.7}, refresh=True, running=False)
    assert copy.fetched == 2
    [seen] = [t for t in copy.with_own(study._storage.get_trial(own._trial_id)) if t.number == other.number]
    assert seen.params == {"x": other.params["x"]} and seen.intermediate_values == {}  # as read

    copy.report(own._trial_id, {}, refresh=True, running=True)  # a reader of running trials' values
    assert copy.fetched == 3
    [seen] = [t for t in copy.refresh(running=False) if t.number == other.number]
    assert seen.intermediate_values == {1: 0.5}

    before = copy.fetched
    study.tell(other, 1.0)  # finished: read once more, in full, whatever the reader
    [seen] = [t for t in copy.refresh(running=False) if t.number == other.number]
    assert copy.fetched - before == 2  # it, and `own` (no params, and not the reporter here)
    assert seen.state == optuna.trial.TrialState.COMPLETE and seen.value == 1.0
    assert study._storage.get_trial(own._trial_id).intermediate_values == {1: 0.7}


def test_a_trial_read_in_another_state_is_read_again(tmp_path) -> None:
    study = _study(tmp_path)
    study.enqueue_trial({"x": 0.25})
    copy = storage.StudyTrials(study._storage._backend, study._study_id)
    [waiting] = copy.refresh(running=False)
    assert waiting.state == optuna.trial.TrialState.WAITING
    trial = study.ask()  # takes the queued trial
    trial.suggest_float("x", 0.0, 1.0)
    [running] = copy.refresh(running=False)
    assert running.state == optuna.trial.TrialState.RUNNING and running.params == {"x": 0.25}
    assert copy.fetched == 2


@pytest.mark.parametrize(
    ("pruner", "reads"),
    [
        (make_pruner("median:warmup=auto", 10), False),
        (make_pruner("median:startup=2,warmup=1", 10), False),
        (make_pruner("none", 10), False),
        (optuna.pruners.PercentilePruner(25.0), False),
        (optuna.pruners.ThresholdPruner(upper=1.0), False),
        (optuna.pruners.PatientPruner(optuna.pruners.MedianPruner(), patience=1), False),
        (make_pruner("successive-halving", 10), True),
        (make_pruner("successive-halving:min=auto", 10), True),
        (make_pruner("hyperband", 10), True),
        (optuna.pruners.PatientPruner(optuna.pruners.SuccessiveHalvingPruner(), patience=1), True),
        (optuna.pruners.SuccessiveHalvingPruner(), True),
    ],
)
def test_only_pruners_that_read_other_running_trials_ask_for_them(pruner, reads) -> None:
    assert reads_running_trials(pruner) is reads


def test_an_unknown_pruner_is_taken_to_read_running_trials() -> None:
    class Custom(optuna.pruners.BasePruner):
        def prune(self, study, trial) -> bool:
            return False

    assert reads_running_trials(Custom())


def test_the_reporting_trials_rung_records_are_read_only_when_asked_for(tmp_path) -> None:
    import sqlalchemy

    study = _study(tmp_path)
    own = study.ask()
    backend = study._storage._backend
    backend.set_trial_system_attr(own._trial_id, "completed_rung_0", 0.5)
    copy = storage.StudyTrials(backend, study._study_id)
    statements: list[str] = []

    def seen(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    sqlalchemy.event.listen(backend.engine, "before_cursor_execute", seen)
    try:
        copy.report(own._trial_id, {1: 0.7}, refresh=True, running=False, own_attrs=False)
        assert copy.own_system_attrs == {}
        assert statements and not [s for s in statements if "trial_system_attributes" in s]
        copy.report(own._trial_id, {2: 0.6}, refresh=True, running=True)  # a reader of rung records
        assert copy.own_system_attrs == {"completed_rung_0": 0.5}
        assert [s for s in statements if "trial_system_attributes" in s]
    finally:
        sqlalchemy.event.remove(backend.engine, "before_cursor_execute", seen)
    assert study._storage.get_trial(own._trial_id).intermediate_values == {1: 0.7, 2: 0.6}


def test_a_read_lists_the_trials_it_found_unfinished_for_samplers_looking_for_running_ones(tmp_path) -> None:
    study = _study(tmp_path)
    first, second = study.ask(), study.ask()
    study.tell(first, 1.0)
    study.enqueue_trial({"x": 0.5})
    third = study.ask()
    study.ask()  # the queued one, running
    study.enqueue_trial({"x": 0.75})
    copy = storage.StudyTrials(study._storage._backend, study._study_id)
    read = copy.refresh(running=False)
    assert [t.number for t in read] == [0, 1, 2, 3, 4]
    assert [t.number for t in read.unfinished] == [1, 2, 3, 4]
    study.tell(second, 2.0)
    study.tell(third, state=optuna.trial.TrialState.PRUNED)
    read = copy.refresh(running=False)  # a read of what changed
    assert [t.number for t in read.unfinished] == [3, 4]
    assert [t.number for t in read.unfinished] == [t.number for t in read if not t.state.is_finished()]
