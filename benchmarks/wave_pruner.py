"""Experiment: prune the first wave of a many-worker search from the running trials' partial curves.

With 32 workers the default's median rule waits for 5 complete trials, and 32 random trials run
unpruned until then. Here, before that, a trial is compared with the other trials at its epoch
(running, pruned or complete) from a first rung read off the partial curves: the first epoch
whose values rank the trials as their values at the *horizon* do (Spearman >= ``rho``), the
horizon being the furthest epoch ``wave`` trials have reached and at least ``factor`` times the
rung. Once ``startup`` trials have completed the default's rule (``AdaptiveMedian``) decides.
Measured in docs/search-strategy.md (2026-11-27, third); not part of the product.
"""

from __future__ import annotations

import statistics
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.settings._pruners import AdaptiveMedian, spearman


class WaveMedian(AdaptiveMedian):
    def __init__(self, startup: int, rho: float, *, wave: int, factor: int = 3, confidence: float = 0.5) -> None:
        super().__init__(startup, rho, interval=1, min_trials=1, confidence=confidence)
        self._wave, self._factor = wave, factor

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(complete) >= max(self._startup, 3):
            return super().prune(study, trial)
        step = trial.last_step
        if step is None:
            return False
        trials = [t for t in study.get_trials(deepcopy=False) if t.intermediate_values]
        rung = wave_rung(trials, self._wave, self._factor, self._rho)
        if rung is None or step < rung:
            return False
        others = [t.intermediate_values[step] for t in trials
                  if t.number != trial.number and step in t.intermediate_values]  # fmt: skip
        if len(others) < self._wave // 2:
            return False
        best = min(value for at, value in trial.intermediate_values.items() if at <= step)
        return best > statistics.median(others)


def wave_rung(trials: list[FrozenTrial], wave: int, factor: int, rho: float) -> int | None:
    """The first epoch whose values rank ``trials`` as their values at the horizon do, if any."""
    if len(trials) < wave:
        return None
    horizon = sorted((max(t.intermediate_values) for t in trials), reverse=True)[wave - 1]
    for epoch in range(1, horizon // factor + 1):
        pairs = [(t.intermediate_values[epoch], t.intermediate_values[horizon]) for t in trials
                 if epoch in t.intermediate_values and horizon in t.intermediate_values]  # fmt: skip
        if len(pairs) >= 3 and spearman(pairs) >= rho:
            return epoch
    return None


def wave_study(wave: int, factor: int = 3) -> Any:
    """A strategy's study builder: the default sampler, and the default's median rule with this first wave."""
    from search.settings import SearchSettings, make_pruner, make_sampler

    default = SearchSettings()

    def build(problem: Any, seed: int) -> optuna.Study:
        # Checked when the experiment runs, so that it goes on measuring what it says it does.
        base = make_pruner(default.pruner, problem.epochs)
        if not isinstance(base, AdaptiveMedian):
            raise SystemExit(
                f"wave{wave} extends the default median:warmup=auto; the default is now {default.pruner!r}"
            )
        pruner = WaveMedian(base._startup, base._rho, wave=wave, factor=factor, confidence=base._confidence)
        return optuna.create_study(study_name=problem.name, sampler=make_sampler(default.sampler, seed), pruner=pruner)

    return build
