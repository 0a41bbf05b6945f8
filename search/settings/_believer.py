"""TPE beside running trials: a running trial that has reported is read as complete, at the final
value its curve so far ranks it at (a "believer" in place of the constant liar's bad value)."""

from __future__ import annotations

import copy
from typing import Any

from optuna.samplers import BaseSampler
from optuna.trial import TrialState

MIN_CURVES = 3
"""Complete trials that reported at a running trial's last epoch, at least, before it is believed."""


class Believer(BaseSampler):
    """``inner`` (TPE) reads each running trial that has reported, and whose epoch ranks the complete
    trials (Spearman of their best so far there with their final values at least ``rho``), as a
    complete trial: its value is the final value found at the same rank among the complete trials
    that reported at that epoch. The others stay running (the constant liar's bad value).

    A worker that samples beside running trials then learns from their curves as one worker
    learns from the trials before it: with the constant liar alone every running trial counts as
    bad, and a model-based search with two workers loses to the same search run sequentially
    (docs/experiments/2026-11-29-one-worker-and-optuna-parallel.md). One objective only; with one
    worker nothing runs beside a trial and the search is the inner sampler's, draw for draw.
    """

    def __init__(self, inner: BaseSampler, rho: float = 0.8) -> None:
        self.inner, self.rho = inner, rho
        self._memo: tuple[int, list[Any], list[Any]] | None = None  # trial number, read, what it is shown

    def _believed(self, study: Any, trial: Any) -> Any:
        from storage import study_seeing

        if len(study.directions) > 1:
            return study
        minimize = study.direction.name == "MINIMIZE"

        def select(trials: list[Any]) -> list[Any]:
            # A trial's parameters are suggested from one read of the study: believed once for them all.
            if self._memo is None or self._memo[0] != trial.number or self._memo[1] is not trials:
                self._memo = (trial.number, trials, believe(trials, trial.number, minimize, self.rho))
            return self._memo[2]

        return study_seeing(study, select)

    def before_trial(self, study: Any, trial: Any) -> None:
        self.inner.before_trial(study, trial)

    def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
        return self.inner.infer_relative_search_space(self._believed(study, trial), trial)

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
        return self.inner.sample_relative(self._believed(study, trial), trial, search_space)

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        return self.inner.sample_independent(self._believed(study, trial), trial, param_name, param_distribution)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def __getattr__(self, name: str) -> Any:  # the inner sampler's settings and state
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def believe(trials: list[Any], number: int, minimize: bool, rho: float) -> list[Any]:
    """``trials`` with each running one (but ``number``, the trial being sampled) that can be
    believed replaced by a complete copy at its believed final value; the list itself if none."""
    running = [t for t in trials if t.state == TrialState.RUNNING and t.number != number and t.intermediate_values]
    if not running:
        return trials
    sign = 1.0 if minimize else -1.0
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    by_epoch: dict[int, tuple[list[float], list[float]] | None] = {}
    believed: dict[int, Any] = {}
    for t in running:
        epoch = max(t.intermediate_values)
        if epoch not in by_epoch:
            by_epoch[epoch] = _ranking(complete, epoch, sign, rho)
        reference = by_epoch[epoch]
        if reference is None:
            continue
        partial, final = reference
        mine = _best_until(t, epoch, sign)
        below = sum(p < mine for p in partial) + 0.5 * sum(p == mine for p in partial)
        value = final[min(len(final) - 1, int(below / len(partial) * len(final)))]
        twin = copy.copy(t)
        twin.state, twin.values = TrialState.COMPLETE, [sign * value]
        believed[t.number] = twin
    return [believed.get(t.number, t) for t in trials] if believed else trials


def _best_until(trial: Any, epoch: int, sign: float) -> float:
    return min(sign * v for step, v in trial.intermediate_values.items() if step <= epoch)


def _ranking(complete: list[Any], epoch: int, sign: float, rho: float) -> tuple[list[float], list[float]] | None:
    """The complete trials' bests until ``epoch`` and their sorted final values (signed: lower is
    better), where at least ``MIN_CURVES`` reported there and that epoch ranks them; else None."""
    from search.settings._pruners import spearman

    pairs = [(_best_until(t, epoch, sign), sign * t.value) for t in complete if epoch in t.intermediate_values]
    if len(pairs) < MIN_CURVES or spearman(pairs) < rho:
        return None
    return [p for p, _ in pairs], sorted(f for _, f in pairs)
