"""A worker's copy of its study reads only the trials new or not yet read finished, and misses none."""

from __future__ import annotations

import optuna
import pytest
import sqlalchemy
from optuna.distributions import FloatDistribution

import storage


def _seen(trials: list[optuna.trial.FrozenTrial]) -> list[tuple]:
    return [(t.number, t.state, t.values, t.params, t.intermediate_values) for t in trials]


def test_the_copy_reads_the_changes_and_misses_none(url: str) -> None:
    backend = storage.open_optuna_storage(url)
    study = optuna.create_study(storage=backend)
    sid = study._study_id
    try:
        first, second, third = (study.ask({"x": FloatDistribution(0, 1)}) for _ in range(3))
        study.tell(first, 1.0)
        copy = storage.StudyTrials(backend, sid)
        assert _seen(copy.refresh()) == _seen(backend.get_all_trials(sid))
        before = copy.fetched
        study.tell(second, 2.0)  # a running trial finishes
        study.enqueue_trial({"x": 0.5})  # created outside the study lock, then taken
        study.ask()
        study.add_trial(optuna.trial.create_trial(params={"x": 0.1}, distributions={"x": FloatDistribution(0, 1)},
                                                  value=0.1))  # created finished  # fmt: skip
        third.report(0.3, 1)
        assert _seen(copy.refresh()) == _seen(backend.get_all_trials(sid))
        assert copy.fetched - before == 4  # the finished one, the queued one, the added one, the running one
        with backend.engine.begin() as conn:  # a gap in the numbers (written by other means): read it all
            conn.execute(sqlalchemy.text("UPDATE trials SET number = number + 5 WHERE trial_id = :t"),
                         {"t": study.ask()._trial_id})  # fmt: skip
        study.add_trial(optuna.trial.create_trial(params={"x": 0.2}, distributions={"x": FloatDistribution(0, 1)},
                                                  value=0.2))  # fmt: skip
        assert _seen(copy.refresh()) == _seen(backend.get_all_trials(sid))
        study.tell(third, 3.0)
        assert _seen(copy.refresh()) == _seen(backend.get_all_trials(sid))
    finally:
        backend.engine.dispose()


def test_a_read_that_fails_part_way_misses_nothing_the_next_time(url: str, monkeypatch) -> None:
    """A lost connection while the new trials are read (the caller retries): the retry reads them."""
    import storage._trials as trials_module

    backend = storage.open_optuna_storage(url)
    study = optuna.create_study(storage=backend)
    sid = study._study_id
    try:
        study.tell(study.ask({"x": FloatDistribution(0, 1)}), 1.0)
        copy = storage.StudyTrials(backend, sid)
        copy.refresh()
        for value in (2.0, 3.0):
            study.tell(study.ask({"x": FloatDistribution(0, 1)}), value)
        read = trials_module.read_trials

        def lost(*args, **kwargs):
            monkeypatch.setattr(trials_module, "read_trials", read)
            raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("server closed the connection"))

        monkeypatch.setattr(trials_module, "read_trials", lost)
        with pytest.raises(optuna.exceptions.StorageInternalError):  # Optuna's session wraps it
            copy.refresh()
        assert _seen(copy.refresh()) == _seen(backend.get_all_trials(sid))
    finally:
        backend.engine.dispose()
