"""The wave experiment (benchmarks/wave_pruner.py): the first wave pruned from partial curves."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from benchmarks.wave_pruner import WaveMedian, wave_rung, wave_study
from search.settings import SearchSettings, make_pruner
from search.settings._pruners import AdaptiveMedian


def _curves(n: int, epochs: int) -> list[list[float]]:
    """Epoch 1 ranks the trials backwards, epoch 2 on as their horizon does."""
    return [[100.0 + i, *(float(n - i) + e / 10 for e in range(1, epochs))] for i in range(n)]


def test_the_rung_is_the_first_epoch_that_ranks_the_trials_as_the_horizon_does(numbered):
    trials = [numbered(TrialState.RUNNING, c, 0.5, i) for i, c in enumerate(_curves(10, 6))]
    assert wave_rung(trials, wave=10, factor=3, rho=0.8) == 2  # horizon 6
    assert wave_rung(trials, wave=10, factor=4, rho=0.8) is None  # the rung must lie at horizon / 4 or before
    assert wave_rung(trials[:9], wave=10, factor=3, rho=0.8) is None  # no wave yet


def _study(trials: list[optuna.trial.FrozenTrial], pruner: optuna.pruners.BasePruner) -> optuna.Study:
    study = optuna.create_study(pruner=pruner)
    for t in trials:
        study.add_trial(t)
    return study


def test_before_the_complete_trials_it_prunes_below_the_others_from_the_rung_on(numbered):
    curves = _curves(10, 6)
    pruner = WaveMedian(5, 0.8, wave=10)
    study = _study([numbered(TrialState.RUNNING, c, 0.5, i) for i, c in enumerate(curves)], pruner)
    worst, best = study.trials[0], study.trials[9]  # at epoch 2 on: trial 0 has the highest values
    assert pruner.prune(study, worst) and not pruner.prune(study, best)
    early = numbered(TrialState.RUNNING, [99.0], 0.5, 10)
    assert not pruner.prune(study, early)  # before the rung
    assert not make_pruner("median:warmup=auto", 6).prune(study, worst)  # the default waits for 5 complete


def test_once_enough_trials_complete_it_decides_as_the_default(numbered):
    curves = _curves(12, 6)
    trials = [numbered(TrialState.COMPLETE if i >= 6 else TrialState.RUNNING, c, 0.5, i) for i, c in enumerate(curves)]
    default = make_pruner("median:warmup=auto", 6)
    assert isinstance(default, AdaptiveMedian)
    decisions = []
    for t in trials[:6]:
        wave = WaveMedian(5, 0.8, wave=10)
        decisions.append(wave.prune(_study(trials, wave), t))
        assert decisions[-1] is make_pruner("median:warmup=auto", 6).prune(_study(trials, default), t)
    assert any(decisions)  # the running trials lie above the complete ones' median


def test_the_study_builder_wraps_the_default():
    class Problem:
        name, epochs = "toy", 6

    study = wave_study(10)(Problem(), 0)
    assert isinstance(study.pruner, WaveMedian)
    assert SearchSettings().pruner == "median:warmup=auto"
