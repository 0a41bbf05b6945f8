"""``tpe:believe``: once enough trials run, a running trial that has reported is read as complete,
at the final value its curve so far ranks it at among the complete trials, where that epoch ranks them."""

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


def test_a_study_with_constraints_is_not_believed():
    from storage import constraint_key

    trials = _complete([0.1, 0.2, 0.3, 0.4])
    trials[0].system_attrs[constraint_key("latency_ms")] = -1.0  # feasible; a running trial has none yet
    listed = [*trials, _trial(4, TrialState.RUNNING, {1: 1.05})]
    assert believe(listed, 9, True, 0.8) is listed


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
    assert _search("tpe", 1) == _search("tpe:believe=0", 1) == _search("tpe:believe=1", 1)


def test_it_believes_once_enough_trials_run_beside():
    # Three workers: two run beside each trial sampled, below the default's 3.
    assert _search("tpe", 3) == _search("tpe:believe=0", 3) != _search("tpe:believe=1", 3)
    assert _search("tpe", 6) != _search("tpe:believe=0", 6)
    trials = _complete([0.1, 0.2, 0.3, 0.4])
    running = [_trial(4, TrialState.RUNNING, {1: 1.05}), _trial(5, TrialState.RUNNING, {})]
    assert believe([*trials, *running], 9, True, 0.8, beside=3)[4].state == TrialState.RUNNING
    assert believe([*trials, *running], 9, True, 0.8, beside=2)[4].state == TrialState.COMPLETE


def test_the_spec_says_so_and_refuses_a_negative_count():
    from search.exceptions import SearchError
    from search.settings import parse_sampler

    assert "believed from their curves once 3 run" in parse_sampler("tpe").describe()
    assert "believed" not in parse_sampler("tpe:believe=0").describe()
    with pytest.raises(SearchError, match="tpe:believe"):
        parse_sampler("tpe:believe=-1")


@pytest.mark.parametrize("text", ["tpe:believe=1", "tpe:believe=1,window=0,multivariate=true"])
def test_it_builds_with_and_without_the_window(text):
    assert _search(text, 2, n=15)


def test_what_one_read_keeps_for_the_next_does_not_change_what_is_believed():
    from search.settings._believer import Seen

    seen = Seen()
    trials = _complete([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    running = _trial(19, TrialState.RUNNING, {1: 1.07})
    assert believe([*trials, running], 20, True, 0.8, seen=seen)[-1].value == 0.1
    # One more complete trial, first at epoch 1 and fifth at the end (the epoch still ranks: 0.83):
    # the running curve is now second of nine at epoch 1.
    more = [*trials, _trial(8, TrialState.COMPLETE, {1: 1.05, 2: 0.45}, 0.45)]
    kept = believe([*more, running], 20, True, 0.8, seen=seen)[-1].value
    assert kept == believe([*more, running], 20, True, 0.8)[-1].value == 0.2
