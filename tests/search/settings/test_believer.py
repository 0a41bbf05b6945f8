"""``tpe:believe``: a running trial that has reported is read as complete, at the final value its
curve so far ranks it at among the complete trials, where that epoch ranks them."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from search.settings import make_sampler
from search.settings._believer import believe

DIST = {"x": optuna.distributions.FloatDistribution(0, 1)}


def _trial(number: int, state: TrialState, curve: dict[int, float], value: float | None = None):  # noqa: ANN202
    trial = optuna.trial.create_trial(params={"x": number / 100}, distributions=DIST, state=state,
                                      intermediate_values=curve, value=value)  # fmt: skip
    trial.number = number
    return trial


def _complete(finals: list[float], ranked: bool = True) -> list:
    """Complete trials whose epoch-1 values rank them as their finals do (or in reverse)."""
    out = []
    for i, final in enumerate(finals):
        first = final + 1.0 if ranked else 10.0 - final
        out.append(_trial(i, TrialState.COMPLETE, {1: first, 2: final}, final))
    return out


def test_a_running_trial_is_believed_at_the_final_value_of_its_rank():
    trials = _complete([0.1, 0.2, 0.3, 0.4])
    best = _trial(4, TrialState.RUNNING, {1: 1.05})  # better than all at epoch 1
    worst = _trial(5, TrialState.RUNNING, {1: 9.0})
    middle = _trial(6, TrialState.RUNNING, {1: 1.25})  # between the second and third
    fresh = _trial(7, TrialState.RUNNING, {})  # nothing reported: stays the liar's
    seen = believe([*trials, best, worst, middle, fresh], number=8, minimize=True, rho=0.8)
    by_number = {t.number: t for t in seen}
    assert [by_number[n].state for n in (4, 5, 6, 7)] == [TrialState.COMPLETE] * 3 + [TrialState.RUNNING]
    assert (by_number[4].value, by_number[5].value, by_number[6].value) == (0.1, 0.4, 0.3)
    assert best.state == TrialState.RUNNING  # a copy is shown, the study's trial is untouched
    assert [t.number for t in seen] == list(range(8))


def test_its_best_so_far_is_what_ranks_it():
    trials = [
        _trial(i, TrialState.COMPLETE, {1: f + 1.0, 2: f + 0.5, 3: f}, f) for i, f in enumerate([0.1, 0.2, 0.3, 0.4])
    ]
    dipped = _trial(4, TrialState.RUNNING, {1: 0.5, 2: 9.0})  # a spike at epoch 2: its best ranks first
    assert believe([*trials, dipped], 9, True, 0.8)[-1].value == 0.1
    later = _trial(4, TrialState.RUNNING, {1: 1.5, 2: 0.75})  # epoch 2: between the second and third
    assert believe([*trials, later], 9, True, 0.8)[-1].value == 0.3


def test_nothing_is_believed_where_the_epoch_does_not_rank_or_too_few_reported():
    shuffled = _complete([0.1, 0.2, 0.3, 0.4], ranked=False)
    running = _trial(4, TrialState.RUNNING, {1: 1.05})
    assert believe([*shuffled, running], 9, True, 0.8)[-1].state == TrialState.RUNNING
    few = _complete([0.1, 0.2])
    trials = [*few, running]
    assert believe(trials, 9, True, 0.8) is trials
    assert believe(trials, 4, True, 0.8) is trials  # the trial being sampled is never believed


def test_maximizing_the_best_is_the_highest():
    trials = [_trial(i, TrialState.COMPLETE, {1: f - 1.0, 2: f}, f) for i, f in enumerate([0.1, 0.2, 0.3, 0.4])]
    running = _trial(4, TrialState.RUNNING, {1: 0.0})  # above every epoch-1 value
    assert believe([*trials, running], 9, False, 0.8)[-1].value == 0.4


def _search(sampler_text: str, workers: int, n: int = 30) -> list[float]:
    """Trials asked ``workers`` at a time (each reports epoch 1 before the next is asked), told in order."""
    study = optuna.create_study(sampler=make_sampler(sampler_text, seed=3))
    running: list = []
    xs = []
    for _ in range(n):
        trial = study.ask()
        x = trial.suggest_float("x", -3, 3)
        xs.append(x)
        trial.report((x - 1) ** 2 + 1, 1)
        running.append((trial, (x - 1) ** 2))
        if len(running) >= workers:
            done, value = running.pop(0)
            done.report(value, 2)
            study.tell(done, value)
    return xs


def test_with_one_worker_it_samples_as_tpe_does():
    assert _search("tpe:believe=true", 1) == _search("tpe", 1)


def test_beside_running_trials_it_samples_otherwise_and_the_spec_says_so():
    assert _search("tpe:believe=true", 3) != _search("tpe", 3)
    from search.settings import parse_sampler

    assert "believed" in parse_sampler("tpe:believe=true").describe()


@pytest.mark.parametrize("text", ["tpe:believe=true", "tpe:believe=true,window=0,multivariate=true"])
def test_it_builds_with_and_without_the_window(text):
    assert _search(text, 2, n=15)
