"""The trainer hook that turns each epoch's metric into a pruner report and a stop decision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from search.coordination import retrying
from search.settings import may_prune_at

if TYPE_CHECKING:
    import optuna


class PruningHook:
    """Reports the study metric every epoch; asks the pruner only at the epochs where it can decide.

    ``asked`` counts the pruner's answers: the epochs skipped are those where it could not have
    said anything else than "go on" (``search/settings/_prune_points.py``).
    """

    def __init__(self, trial: optuna.trial.Trial, metric: str) -> None:
        self.trial = trial
        self.metric = metric
        self.pruned_epoch: int | None = None
        self.asked = 0
        self._last_asked: int | None = None

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        value = float(metrics[self.metric])

        def report() -> bool:  # each step is safe to repeat after a lost connection
            self.trial.report(value, step=epoch)  # also the live view's "current epoch"
            steps = self.trial._cached_frozen_trial.intermediate_values
            if not may_prune_at(self.trial.study.pruner, epoch, self._last_asked, steps):
                return False
            prune = self.trial.should_prune()
            self._last_asked, self.asked = epoch, self.asked + 1
            return prune

        if retrying(report, f"reporting epoch {epoch} of trial {self.trial.number}"):
            self.pruned_epoch = epoch
            return True
        return False
