"""The tpe-curves experiment (benchmarks/curves_tpe.py): running trials count by their curves at a common epoch."""

from __future__ import annotations

import statistics

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from benchmarks.curves_tpe import CurvesTPESampler, as_partial, curves_study
from search.settings import SearchSettings, make_pruner, make_sampler

X = FloatDistribution(0.0, 1.0)


def test_running_trials_that_reached_the_common_epoch_are_shown_pruned_there(numbered):
    running = [numbered(TrialState.RUNNING, [1.0] * n, 0.5, i) for i, n in enumerate([5, 4, 3, 2, 0])]
    done = numbered(TrialState.COMPLETE, [0.9, 0.8], 0.1, 5)
    shown = {t.number: t for t in as_partial([*running, done])}
    # 4 running trials have reported: the epoch half of them reached is 4 (trials 0 and 1).
    assert [shown[i].state for i in range(5)] == [TrialState.PRUNED] * 2 + [TrialState.RUNNING] * 3
    assert shown[0].intermediate_values == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    assert shown[1].intermediate_values == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    assert shown[5] is done and shown[2] is running[2]
    assert running[0].state == TrialState.RUNNING and len(running[0].intermediate_values) == 5  # not changed


def test_one_running_trial_is_left_running(numbered):
    trials = [numbered(TrialState.RUNNING, [1.0, 0.9], 0.5, 0), numbered(TrialState.COMPLETE, [1.0], 0.2, 1)]
    assert as_partial(trials) == trials


class _Problem:
    name, epochs = "toy", 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_with_one_worker_it_picks_what_the_per_parameter_tpe_picks(seed):
    """No other trial runs while one worker suggests: the same params as the default's per-parameter
    TPE (its model beside running trials) from the same history."""
    default = SearchSettings()
    studies = [curves_study(0.0)(_Problem(), seed),
               optuna.create_study(sampler=make_sampler("tpe:multivariate=false", seed),
                                   pruner=make_pruner(default.pruner, _Problem.epochs))]  # fmt: skip
    assert isinstance(studies[0].sampler, CurvesTPESampler)
    chosen = []
    for study in studies:
        for _ in range(14):
            trial = study.ask({"x": X, "y": FloatDistribution(-1, 1)})
            for epoch in range(1, 4):
                trial.report((trial.params["x"] - 0.3) ** 2 + trial.params["y"] ** 2 / epoch, epoch)
            study.tell(trial, (trial.params["x"] - 0.3) ** 2 + trial.params["y"] ** 2 / 3)
        chosen.append([t.params for t in study.trials])
    assert chosen[0] == chosen[1]


def test_a_first_wave_of_running_trials_guides_the_next_suggestions():
    """Twelve trials run, none finished: plain TPE is still random; with curves, the next trials are
    drawn near the running trials whose curves are lowest (x near 0.8)."""
    medians = {}
    curves = CurvesTPESampler(seed=7, n_startup_trials=10, multivariate=False)
    for sampler in (make_sampler("tpe:startup=10,multivariate=false", 7), curves):
        study = optuna.create_study(sampler=sampler)
        for i in range(12):
            x = (i + 0.5) / 12
            study.enqueue_trial({"x": x})
            trial = study.ask({"x": X})
            for epoch in range(1, 4):
                trial.report(abs(x - 0.8) + 1 / epoch, epoch)
        medians[type(sampler).__name__] = statistics.median(study.ask({"x": X}).params["x"] for _ in range(20))
    assert abs(medians["CurvesTPESampler"] - 0.8) < 0.1
    assert abs(medians["TPESampler"] - 0.8) > abs(medians["CurvesTPESampler"] - 0.8)


def test_a_common_epoch_below_the_minimum_is_not_used(numbered):
    running = [numbered(TrialState.RUNNING, [1.0] * 3, 0.5, i) for i in range(4)]
    assert [t.state for t in as_partial(running, min_epoch=4)] == [TrialState.RUNNING] * 4
    assert [t.state for t in as_partial(running, min_epoch=3)] == [TrialState.PRUNED] * 4
