"""Experiment: also prune a trial that the study's complete trials say will not beat the best one.

The median rule compares a trial with the others at its epoch. This adds a forecast from the
study's own complete trials: at the trial's epoch e, a least-squares line of the complete trials'
final values on their best value up to e (both in logs when every value is positive), with its
prediction interval. A trial is also pruned once even the optimistic end of that interval,
``z`` standard deviations below the forecast, is worse than the best complete value: the study's
own curves say it will most likely not become the best trial. Where curves rank badly the
interval is wide and nothing more is pruned; where they rank well it prunes early.
Not part of the product; measured in docs/search-strategy.md.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.settings._pruners import AdaptiveMedian


def best_until(trial: FrozenTrial, step: int) -> float | None:
    values = [v for at, v in trial.intermediate_values.items() if at <= step and not math.isnan(v)]
    return min(values) if values else None


def forecast(pairs: list[tuple[float, float]], x: float) -> tuple[float, float] | None:
    """The least-squares forecast of y at ``x`` and its predictive standard deviation."""
    n = len(pairs)
    if n < 5:
        return None
    mx = sum(p[0] for p in pairs) / n
    my = sum(p[1] for p in pairs) / n
    sxx = sum((p[0] - mx) ** 2 for p in pairs)
    if sxx <= 0:
        return None
    slope = sum((p[0] - mx) * (p[1] - my) for p in pairs) / sxx
    residuals = [p[1] - (my + slope * (p[0] - mx)) for p in pairs]
    s = math.sqrt(sum(r * r for r in residuals) / (n - 2))
    return my + slope * (x - mx), s * math.sqrt(1 + 1 / n + (x - mx) ** 2 / sxx)


class ForecastMedian(AdaptiveMedian):
    def __init__(self, startup: int, rho: float, confidence: float, *, z: float, median: bool = True) -> None:
        super().__init__(startup, rho, interval=1, min_trials=1, confidence=confidence)
        self._z, self._median = z, median

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if self._median and super().prune(study, trial):
            return True
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        step = trial.last_step
        if len(complete) < max(self._startup, 5) or step is None:
            return False
        x = best_until(trial, step)
        if x is None:
            return True
        raw = [(best_until(t, step), float(t.value)) for t in complete if t.value is not None]  # type: ignore[arg-type]
        pairs = [(a, b) for a, b in raw if a is not None]
        best = min(b for _, b in pairs) if pairs else math.inf
        logs = x > 0 and all(a > 0 and b > 0 for a, b in pairs)
        if logs:
            pairs, x, best = [(math.log(a), math.log(b)) for a, b in pairs], math.log(x), math.log(best)
        predicted = forecast(pairs, x)
        if predicted is None:
            return False
        mean, sd = predicted
        return mean - self._z * sd > best


def forecast_study(z: float, median: bool = True) -> Any:
    from search.settings import SearchSettings, make_pruner, make_sampler

    default = SearchSettings()

    def build(problem: Any, seed: int) -> optuna.Study:
        base = make_pruner(default.pruner, problem.epochs)
        if not isinstance(base, AdaptiveMedian):
            raise SystemExit(f"the forecast extends the default median:warmup=auto; it is now {default.pruner!r}")
        pruner = ForecastMedian(base._startup, base._rho, base._confidence, z=z, median=median)
        return optuna.create_study(study_name=problem.name, sampler=make_sampler(default.sampler, seed), pruner=pruner)

    return build
