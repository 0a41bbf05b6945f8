"""A sampler that picks, for each trial, between two by how many other trials run (the default TPE)."""

from __future__ import annotations

from typing import Any

from optuna.samplers import BaseSampler, TPESampler
from optuna.trial import TrialState

_KEPT = 1000
"""Trials whose choice is remembered at most: one told by another process never reaches ``after_trial`` here."""


class PerTrial(BaseSampler):
    """Hands each trial, every call about it, to the sampler :meth:`_choose` picked for it as it
    started, remembered until its tell (:meth:`_unseen` for a trial this process did not start)."""

    _chosen: dict[int, BaseSampler]  # trial id -> its sampler, until it is told here

    def _choose(self, study: Any, trial: Any) -> BaseSampler:
        raise NotImplementedError

    def _unseen(self, trial: Any) -> BaseSampler:
        raise NotImplementedError

    def _of(self, trial: Any) -> BaseSampler:
        from storage import trial_id

        chosen = self._chosen.get(trial_id(trial))
        return chosen if chosen is not None else self._unseen(trial)

    def before_trial(self, study: Any, trial: Any) -> None:
        from storage import trial_id

        sampler = self._choose(study, trial)
        if len(self._chosen) >= _KEPT:
            self._chosen.pop(next(iter(self._chosen)))
        self._chosen[trial_id(trial)] = sampler
        sampler.before_trial(study, trial)

    def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
        return self._of(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
        return self._of(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        return self._of(trial).sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        from storage import trial_id

        sampler = self._of(trial)
        self._chosen.pop(trial_id(trial), None)
        sampler.after_trial(study, trial, state, values)


class ByConcurrency(PerTrial):
    """``alone`` for a trial that starts while no other trial of the study runs, ``together`` for the
    study's first trial and beside running ones.

    The choice is made when the trial starts (``before_trial``) and kept for all of its parameters.
    The default TPE uses it with the joint model alone, where the benchmark found it better (one
    worker: trials follow one another), and the per-parameter model beside running trials, where
    the joint model, fitted to a constant-liar placeholder for every running trial, did worse
    (docs/search-strategy.md). With several workers it samples exactly as the per-parameter model.
    """

    def __init__(self, alone: TPESampler, together: TPESampler) -> None:
        from storage import share_random_stream

        self.alone, self.together = alone, together
        # One random stream for both: the draws do not depend on which model makes them (with
        # one seed each, their start-up draws would repeat each other's). So one worker's search is
        # the joint model's and a parallel one the per-parameter model's, draw for draw.
        share_random_stream(alone, together)
        self._chosen = {}

    def _unseen(self, trial: Any) -> BaseSampler:
        return self.together

    def _choose(self, study: Any, trial: Any) -> BaseSampler:
        from storage import cached_study_trials

        # A study's first trial is ``together``'s too (it starts alone in a parallel search as well):
        # so a parallel search samples exactly as ``together`` alone would.
        # The claim's read of the study, just after it created this trial (Optuna's per-trial cache):
        # no second read of every trial on the way to each trial's start.
        # Running trials are mostly the latest: looked for from the end, the study not copied; in a
        # worker's read (``storage.TrialList``), among the trials it read unfinished only.
        trials = cached_study_trials(study)
        others = any(t.number != trial.number for t in trials[:2])
        looked = getattr(trials, "unfinished", None)
        looked = reversed(trials) if looked is None else looked
        alone = others and not any(t.state == TrialState.RUNNING and t.number != trial.number for t in looked)
        return self.alone if alone else self.together

    def reseed_rng(self) -> None:
        self.alone.reseed_rng()  # the stream both use


class QueuedOnly(BaseSampler):
    """Grid search's sampler: it serves only queued trials, whose params are all fixed already.

    Asked for a value, it fails the trial: the study suggested a parameter that is not on the grid
    (one it suggests only for some values of another, which the grid, taken from the declared
    space, cannot hold).
    """

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        raise RuntimeError(
            f"grid search: trial {trial.number} has no grid value for parameter {param_name!r} (the grid holds the "
            "parameters the study suggests for every configuration, not one it suggests only for some)"
        )


class HandOff(PerTrial):
    """``first`` draws the study's first ``until`` logical trials, ``then`` draws the rest.

    Logical as the budget counts them: a retry or a resumption (``failed_trial``) goes on with an
    earlier trial's params and is not counted, so failures do not bring the hand-off forward. The
    choice is the same in every worker (the trials numbered below one exist, with their attributes,
    once it is created) and for every parameter of a trial. ``--sampler gp:until=N`` uses it: the
    Gaussian process where it was measured ahead (the first trials), TPE beyond, where a Gaussian
    process's suggestions slow as trials grow.
    """

    def __init__(self, first: BaseSampler, then: BaseSampler, until: int) -> None:
        self.first, self.then, self.until = first, then, until
        self._handed: int | None = None  # the lowest trial number seen to be ``then``'s: so is every later one
        self._chosen = {}

    def _choose(self, study: Any, trial: Any) -> BaseSampler:
        from search.settings._pruners import logical_number
        from storage import cached_study_trials

        if trial.number < self.until:  # fewer trials below it, retries or not
            return self.first
        if self._handed is not None and trial.number >= self._handed:
            return self.then
        below = sum(1 for t in cached_study_trials(study) if t.number < trial.number and logical_number(t) == t.number)
        if below < self.until:
            return self.first
        self._handed = trial.number if self._handed is None else min(self._handed, trial.number)
        return self.then

    def _unseen(self, trial: Any) -> BaseSampler:
        return self.first if trial.number < self.until else self.then

    def reseed_rng(self) -> None:
        self.first.reseed_rng()
        self.then.reseed_rng()
