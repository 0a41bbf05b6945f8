"""TPE's window: past ``window`` finished trials the model reads the best tenth and the most recent,
and below it exactly what it read without one (``test_algorithms.py``'s exact-sampling tests run
the default window too)."""

from __future__ import annotations

import optuna
import pytest

from search.settings import make_sampler


class Spy(optuna.samplers.RandomSampler):
    """Records the trials the sampler is shown for each suggestion."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.seen: list[list[int]] = []

    def sample_independent(self, study, trial, param_name, param_distribution):  # noqa: ANN001
        self.seen.append([t.number for t in study._get_trials(deepcopy=False, use_cache=False)])
        return super().sample_independent(study, trial, param_name, param_distribution)


def _study(n: int, direction: str = "minimize") -> optuna.Study:
    study = optuna.create_study(direction=direction)
    dist = optuna.distributions.FloatDistribution(0, 1)
    for i in range(n):
        state = optuna.trial.TrialState.PRUNED if i % 7 == 3 else optuna.trial.TrialState.COMPLETE
        value = None if state == optuna.trial.TrialState.PRUNED else float((i * 37) % 101)
        study.add_trial(optuna.trial.create_trial(params={"x": 0.5}, distributions={"x": dist}, value=value,
                                                  state=state, intermediate_values={0: 1.0}))  # fmt: skip
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    return study


def _windowed(spy: Spy, window: int):  # noqa: ANN202
    from search.settings._windowed import Windowed

    return Windowed(spy, window)


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_past_the_window_the_sampler_sees_the_best_tenth_the_most_recent_and_the_running(direction):
    study = _study(300, direction)
    study.sampler = _windowed(spy := Spy(), 50)
    running = study.ask()
    running.suggest_float("x", 0, 1)
    seen = spy.seen[-1]
    finished = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
    complete = sorted((t for t in finished if t.state.name == "COMPLETE"), key=lambda t: t.value,
                      reverse=direction == "maximize")  # fmt: skip
    best = {t.number for t in complete[:5]}
    recent = [t.number for t in finished if t.number not in best][-45:]
    assert seen == sorted({*best, *recent, running.number})
    assert len(seen) == 51 and best <= set(seen)


def test_up_to_the_window_the_sampler_sees_every_trial_as_read():
    study = _study(50)
    study.sampler = _windowed(spy := Spy(), 50)
    study.ask().suggest_float("x", 0, 1)
    assert spy.seen[-1] == [t.number for t in study.trials]  # the failed one and the running one too


def test_the_default_tpe_has_a_window_of_a_thousand_and_zero_turns_it_off():
    from search.settings._windowed import Windowed

    assert isinstance(make_sampler("tpe", seed=1), Windowed) and make_sampler("tpe", seed=1).window == 1000
    assert not isinstance(make_sampler("tpe:window=0", seed=1), Windowed)


def test_a_window_kept_up_to_date_trial_after_trial_sees_what_a_fresh_one_sees():
    """Each suggestion goes over the trials new or unfinished since the last; the selection is the
    one every trial gone over afresh gives: a trial that was running at one read and has finished
    at the next (complete, pruned or failed) counts as finished."""
    from optuna.trial import TrialState

    study = _study(40)
    study.sampler = _windowed(spy := Spy(), 20)
    long_running = [study.ask() for _ in range(3)]
    endings = {10: {"values": 0.5}, 30: {"state": TrialState.PRUNED}, 50: {"state": TrialState.FAIL}}
    for step in range(60):
        trial = study.ask()
        trial.suggest_float("x", 0, 1)
        fresh = _windowed(Spy(), 20)._select(study.get_trials(deepcopy=False), trial.number, study)
        assert spy.seen[-1] == [t.number for t in fresh]
        assert len([t for t in fresh if t.state.name in ("COMPLETE", "PRUNED")]) == 20
        if step % 5:
            study.tell(trial, float((step * 53) % 97))
        else:
            study.tell(trial, state=TrialState.PRUNED)
        if step in endings:  # a long-running trial finishes, each a different way
            study.tell(long_running.pop(), **endings[step])


def test_tpe_through_its_window_samples_as_tpe_over_a_study_of_those_trials_alone():
    """TPE itself reads through the window, and nothing else of the study: given the windowed
    trials alone (in their order) plain TPE suggests the same values, and it does so every time."""
    import random

    rng = random.Random(5)
    dist = optuna.distributions.FloatDistribution(0, 1)
    trials = [optuna.trial.create_trial(params={"x": x}, distributions={"x": dist}, value=(x - 0.3) ** 2 + rng.random())
              for x in (rng.random() for _ in range(300))]  # fmt: skip
    best = sorted(range(300), key=lambda i: trials[i].value)[:5]
    kept = sorted({*best, *[i for i in range(300) if i not in best][-45:]})

    def suggest(sampler: str, given: list) -> list[float]:
        study = optuna.create_study(sampler=make_sampler(sampler, seed=7))
        study.add_trials(given)
        return [study.ask().suggest_float("x", 0, 1) for _ in range(3)]

    windowed = suggest("tpe:window=50,multivariate=false", trials)
    assert windowed == suggest("tpe:window=0,multivariate=false", [trials[i] for i in kept])
    assert windowed == suggest("tpe:window=50,multivariate=false", trials)
    assert windowed != suggest("tpe:window=0,multivariate=false", trials)
