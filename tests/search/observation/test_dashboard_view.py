"""What optuna-dashboard reads of a large study (`search/observation/_dashboard_view.py`): a drawn list
that only grows at its end, refreshed by reading what changed."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

import storage
from search.observation._dashboard_view import DashboardView, dashboard_storage

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


@pytest.fixture
def study(tmp_path):
    store = optuna.storages.RDBStorage(storage.sqlite_url(tmp_path / "optuna.db"))
    study = optuna.create_study(study_name="big", storage=store)
    for number in range(60):  # values fall every tenth trial: those are the improvements
        study.add_trial(optuna.trial.create_trial(value=100.0 - number if number % 10 == 0 else 200.0 + number))
    study.ask()  # trial 60, running
    return study, store


def _numbers(trials):
    return [t.number for t in trials]


def test_a_study_within_the_limit_is_shown_whole(study):
    study, store = study
    view = DashboardView(store, study._study_id, maximize=False, limit=100)
    assert not view.drawn()
    assert view.get_all_trials(study._study_id) == store.get_all_trials(study._study_id)


def test_a_large_study_is_drawn_and_the_list_grows_only_at_its_end(study):
    study, store = study
    view = DashboardView(store, study._study_id, maximize=False, limit=20, best=5)
    sid = study._study_id
    first = view.get_all_trials(sid, deepcopy=False)
    numbers = _numbers(first)
    assert view.drawn() and view.total == 61 and len(first) < 40
    assert numbers == sorted(numbers)
    assert {0, 10, 20, 30, 40, 50, 60} <= set(numbers)  # every improvement and the running trial
    running = store.get_all_trials(sid, states=(TrialState.RUNNING,))[0]

    study.tell(running.number, 1.0)  # the running trial completes, two new ones come
    study.add_trial(optuna.trial.create_trial(value=300.0))
    study.ask()
    fetched = view.fetched
    again = view.get_all_trials(sid, deepcopy=False)

    assert _numbers(again) == [*numbers, 61, 62]  # the dashboard's `after=N` reads stay right
    assert view.fetched - fetched == 3  # the one that was running and the two new ones, nothing else
    assert again[numbers.index(60)].state == TrialState.COMPLETE and again[-1].state == TrialState.RUNNING
    assert view.get_all_trials(sid, states=(TrialState.RUNNING,))[0].number == 62


def test_optuna_dashboard_gets_an_rdb_storage_that_reads_through_the_view(study):
    study, store = study
    view = DashboardView(store, study._study_id, maximize=False, limit=20, best=5)
    viewed = dashboard_storage(store, view)
    assert isinstance(viewed, optuna.storages.RDBStorage)
    assert _numbers(viewed.get_all_trials(study._study_id)) == _numbers(view.get_all_trials(study._study_id))
    assert viewed.get_best_trial(study._study_id).value == 50.0  # the study's best, read by Optuna
    other = optuna.create_study(study_name="small", storage=viewed)  # other studies pass through whole
    other.add_trial(optuna.trial.create_trial(value=1.0))
    assert len(viewed.get_all_trials(other._study_id)) == 1
