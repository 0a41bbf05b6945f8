"""The one-round-trip reads and writes on the claim and finish path, on SQLite and the real PostgreSQL."""

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

import storage


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return storage.sqlite_url(tmp_path / "optuna.db")
    make: Callable[[], str] = request.getfixturevalue("pg_databases")
    return make()


def _study(url: str) -> tuple[optuna.Study, optuna.storages.RDBStorage]:
    backend = storage.open_optuna_storage(url)
    return optuna.create_study(storage=backend, study_name="rows"), backend


def test_counts_and_attribute_come_back_together(url: str) -> None:
    study, backend = _study(url)
    try:
        empty, budget = storage.count_trials_and_attr(backend.engine, study._study_id, "budget")
        assert (empty.total, budget) == (0, None)  # no trials: the attribute row alone
        study.set_user_attr("budget", 7)
        study.tell(study.ask(), 1.0)
        study.tell(study.ask(), state=TrialState.FAIL)
        study.ask()
        retry = optuna.trial.create_trial(state=TrialState.WAITING, system_attrs={"failed_trial": 1})
        backend.create_new_trial(study._study_id, template_trial=retry)
        counts, budget = storage.count_trials_and_attr(backend.engine, study._study_id, "budget")
        assert budget == 7
        assert counts.by_state == {"COMPLETE": 1, "FAIL": 1, "RUNNING": 1, "WAITING": 1}
        assert counts.logical == 3  # the retry continues trial 1
        assert counts == storage.count_trials(backend.engine, study._study_id)
    finally:
        backend.engine.dispose()


def test_set_user_attrs_upserts_all_and_refuses_a_finished_trial(url: str) -> None:
    study, backend = _study(url)
    try:
        trial = study.ask()
        storage.set_user_attrs(backend, trial._trial_id, {"a": 1, "b": "x"})
        storage.set_user_attrs(backend, trial._trial_id, {"b": [1, 2], "c": None})
        assert backend.get_trial(trial._trial_id).user_attrs == {"a": 1, "b": [1, 2], "c": None}
        study.tell(trial, 0.5)
        with pytest.raises(UpdateFinishedTrialError):
            storage.set_user_attrs(backend, trial._trial_id, {"late": True})
        assert "late" not in backend.get_trial(trial._trial_id).user_attrs
    finally:
        backend.engine.dispose()
