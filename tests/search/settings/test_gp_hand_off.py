"""``gp:until=N``: the Gaussian process draws the study's first N trials, the default TPE the rest."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from search.exceptions import SearchError
from search.settings import describe, make_sampler, validate
from search.settings._pruned_seen import PrunedAsWorst
from search.settings._samplers import HandOff


class _Recording(optuna.samplers.RandomSampler):
    """A real random sampler that notes which trials it was asked about, and for what."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed)
        self.calls: list[tuple[str, int]] = []

    def before_trial(self, study: Any, trial: Any) -> None:
        self.calls.append(("before", trial.number))
        super().before_trial(study, trial)

    def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
        self.calls.append((name, trial.number))
        return super().sample_independent(study, trial, name, dist)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self.calls.append(("after", trial.number))
        super().after_trial(study, trial, state, values)


def test_trials_below_until_go_to_the_first_sampler_and_every_later_one_to_the_second():
    first, then = _Recording(1), _Recording(2)
    study = optuna.create_study(sampler=HandOff(first, then, until=3))
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_int("n", 1, 4), n_trials=5)
    # Every call for a trial goes to the one sampler its number picks, the last one (its tell) included.
    assert {n for _, n in first.calls} == {0, 1, 2} and {n for _, n in then.calls} == {3, 4}
    assert [c for c in first.calls if c[1] == 0] == [("before", 0), ("x", 0), ("n", 0), ("after", 0)]
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 5


def test_the_choice_is_the_same_in_another_worker():
    # A second sampler object (another worker's) on the same study picks by the same rule, whatever
    # it has or has not seen: trial 4 is the second sampler's in both.
    storage = optuna.storages.InMemoryStorage()
    one = optuna.create_study(storage=storage, study_name="s", sampler=HandOff(_Recording(1), _Recording(2), 4))
    one.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=4)
    then = _Recording(3)
    other = optuna.load_study(study_name="s", storage=storage, sampler=HandOff(_Recording(4), then, 4))
    other.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert then.calls == [("before", 4), ("x", 4), ("after", 4)]


def test_a_retry_does_not_count_towards_the_hand_off():
    """Trial 2 is trial 0's retry (its params fixed): trial 3 is the third logical trial, so still the
    first sampler's with until=3, and trial 4 the first of the second's. Without the retry's trial
    number counted out, 3 would be handed off already."""
    first, then = _Recording(1), _Recording(2)
    study = optuna.create_study(sampler=HandOff(first, then, until=3))
    objective = lambda t: t.suggest_float("x", 0, 1)  # noqa: E731
    study.optimize(objective, n_trials=2)
    x = study.trials[0].distributions["x"]
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.WAITING, params={"x": 0.5},
                                              distributions={"x": x}, system_attrs={"failed_trial": 0}))  # fmt: skip
    study.optimize(objective, n_trials=3)
    assert study.trials[2].system_attrs["failed_trial"] == 0 and study.trials[2].params == {"x": 0.5}
    assert ("x", 3) in first.calls and {n for _, n in then.calls} == {4}


def test_gp_until_builds_the_gaussian_process_then_the_default_tpe():
    built = make_sampler("gp:until=100", seed=1)
    assert isinstance(built, HandOff) and built.until == 100
    assert isinstance(built.first, PrunedAsWorst)
    assert type(built.then).__name__ == type(make_sampler("tpe", seed=1)).__name__
    assert isinstance(make_sampler("gp", seed=1), PrunedAsWorst)  # until=0: no hand-off
    assert "TPE from trial 100 on" in describe("gp:until=100", "median")
    assert "TPE" not in describe("gp", "median").split("pruner")[0]


def test_a_bad_until_is_one_line():
    with pytest.raises(SearchError, match="gp:until"):
        validate("gp:until=-1", "median")
