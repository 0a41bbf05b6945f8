"""The trainer hook that turns each epoch's metric into a pruner report and a stop decision."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Container, Mapping
from typing import TYPE_CHECKING, Any

import storage as st
from search.coordination import retrying
from search.settings import epochs_since_best, may_prune_at, reads_running_trials

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial, TrialState


class _StudyAsSeen:
    """The Optuna study as the pruner reads it: its trials from the worker's copy (``StudyTrials``),
    listed only if the pruner asks for them, and the complete trials' values by step
    (``complete_steps``, what the median rule reads instead); its directions read once. Everything
    else is the study itself."""

    def __init__(self, study: optuna.Study, trials: Callable[[], list[FrozenTrial]], directions: list[Any],
                 complete_steps: st.StepValues) -> None:  # fmt: skip
        self._study = study
        self._list = trials
        self.directions = directions
        self.direction = directions[0]
        self.complete_steps = complete_steps
        self._by_states: dict[Any, list[FrozenTrial]] = {}  # a decision asks twice (warm-up, rule): one pass

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        key: tuple[TrialState, ...] | None = None if states is None else tuple(states)  # type: ignore[arg-type]
        if key not in self._by_states:
            self._by_states[key] = [t for t in self._list() if states is None or t.state in states]
        kept = self._by_states[key]
        return copy.deepcopy(kept) if deepcopy else list(kept)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:  # fmt: skip
        return self.get_trials(deepcopy, states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)


def _best(values: Any, sign: float) -> float:
    """The best of ``values`` (the smallest of ``sign * value``, as a value), NaN if none is a number."""
    kept = [v for v in values if not math.isnan(v)]
    return min(kept, key=lambda v: sign * v) if kept else math.nan


STORE_EVERY_S = 1.0
"""The longest a reported epoch's value waits to be stored while its trial runs (what the dashboard
and the live view show of a running trial): epochs of a second or more are stored as they end."""


class PruningHook:
    """Reports the study metric every epoch; asks the pruner only at the epochs where it can decide.

    ``asked`` counts the pruner's answers: the epochs skipped are those where it could not have
    said anything else than "go on" (``search/settings/_prune_points.py``). The pruner decides
    from this trial's values as reported here and the study's other trials, whose changes since the
    last ask are read at each ask (``storage.StudyTrials``, shared by a worker's trials: finished
    trials are read once, and other running ones once with their params unless the pruner reads
    their values or rung records: ``search.settings.reads_running_trials``). The values are
    stored in batches, in the same transaction: once ``STORE_EVERY_S`` has passed since the last
    store, when a checkpoint holds the epoch (so that a trial resumed from it has every value before
    it), and at the end, with the tell (``unstored``).

    With ``patience`` above 0 it also ends a trial that the pruner lets go on once its metric has not
    improved for that many epochs (``stopped_epoch``; the trial completes with its best epoch's
    value). It counts from the trial's reported values, so a retry that inherited its attempt's
    epochs goes on counting where the attempt stopped. With ``spare`` above 0 it lets a stalled
    trial go on while its best value is within that top fraction of the complete trials' best
    values (read when the rule would end it): it may still hold the study's best model.
    """

    def __init__(self, trial: optuna.trial.Trial, metric: str, trials: st.StudyTrials | None = None, *,
                 patience: int = 0, maximize: bool = False, spare: float = 0.0) -> None:  # fmt: skip
        self.trial = trial
        self.metric = metric
        self.patience, self.maximize, self.spare = patience, maximize, spare
        self.pruned_epoch: int | None = None
        self.stopped_epoch: int | None = None
        self.asked = 0
        self.unstored: dict[int, float] = {}  # reported, not stored yet: step -> value
        self._last_asked: int | None = None
        self._stored_at = time.monotonic()
        self._checkpointed = False
        storage = st.study_storage(trial.study)  # workers' studies are in an RDBStorage
        self._trials = trials or st.StudyTrials(storage, st.study_id(trial.study))  # type: ignore[arg-type]
        self._directions: list[Any] | None = None
        # Else running trials are read once, and this trial's rung records not at all: the pruners
        # that read no other running trial read only this trial's values and the complete trials.
        self._running = reads_running_trials(trial.study.pruner)

    def checkpoint_saved(self, epoch: int) -> None:
        """The epoch about to be reported is in a checkpoint: store it with every value before it."""
        self._checkpointed = True

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        trial, study = self.trial, self.trial.study
        reported = st.cached_frozen_trial(trial).intermediate_values  # also the live view's "current epoch"
        if epoch not in reported:  # as Optuna's report: a step already reported keeps its value
            reported[epoch] = self.unstored[epoch] = float(metrics[self.metric])
        ask = may_prune_at(study.pruner, epoch, self._last_asked, reported)

        def report() -> bool:  # each step is safe to repeat after a lost connection
            due = self._checkpointed or time.monotonic() - self._stored_at >= STORE_EVERY_S
            store = bool(self.unstored) and due
            if store or ask:
                self._trials.report(st.trial_id(trial), self.unstored if store else {}, refresh=ask,
                                    running=self._running, own_attrs=self._running)  # fmt: skip
            if store:
                self.unstored, self._stored_at, self._checkpointed = {}, time.monotonic(), False
            if not ask:
                return False
            if self._directions is None:
                self._directions = study.directions
            current = copy.copy(st.cached_frozen_trial(trial))  # params and values as this worker reported them
            if self._running:
                current.system_attrs = self._trials.own_system_attrs  # rung records as stored
            seen = _StudyAsSeen(study, lambda: self._trials.with_own(current), self._directions,
                                self._trials.complete_steps)  # fmt: skip
            prune = study.pruner.prune(seen, current)  # type: ignore[arg-type]  # a study, as pruners read it
            self._last_asked, self.asked = epoch, self.asked + 1
            return prune

        if retrying(report, f"reporting epoch {epoch} of trial {self.trial.number}"):
            self.pruned_epoch = epoch
            return True
        if self.patience and epochs_since_best(reported, epoch, self.maximize) >= self.patience:
            if self.spare and retrying(lambda: self._in_contention(reported), f"reading trials for epoch {epoch}"):
                return False
            self.stopped_epoch = epoch
            return True
        return False

    def _in_contention(self, reported: Mapping[int, float]) -> bool:
        """This trial's best so far is within the top ``spare`` of the complete trials' bests (none: no)."""
        from optuna.trial import TrialState

        sign = -1.0 if self.maximize else 1.0
        own = st.trial_id(self.trial)
        bests = sorted(sign * best for t in self._trials.refresh(running=self._running)
                       if t.state == TrialState.COMPLETE and st.trial_id(t) != own
                       and not math.isnan(best := _best(t.intermediate_values.values(), sign)))  # fmt: skip
        if not bests:
            return False
        cutoff = bests[min(len(bests), max(1, math.ceil(self.spare * len(bests)))) - 1]
        return _best(reported.values(), sign) * sign <= cutoff
