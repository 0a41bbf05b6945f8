"""The trainer hook that turns each epoch's metric into a pruner report and a stop decision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from search.coordination import retrying

if TYPE_CHECKING:
    import optuna


class PruningHook:
    """Reports the study metric each epoch and asks to stop when the pruner says so."""

    def __init__(self, trial: optuna.trial.Trial, metric: str) -> None:
        self.trial = trial
        self.metric = metric
        self.pruned_epoch: int | None = None

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        value = float(metrics[self.metric])

        def report() -> bool:  # each step is safe to repeat after a lost connection
            self.trial.report(value, step=epoch)  # also the live view's "current epoch"
            return self.trial.should_prune()

        if retrying(report, f"reporting epoch {epoch} of trial {self.trial.number}"):
            self.pruned_epoch = epoch
            return True
        return False
