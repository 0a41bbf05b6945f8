"""Wilcoxon's signed-rank test across folds: prune a k-fold trial whose folds are worse than the best trial's."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from search.settings._spec import Option, PrunerSpec

if TYPE_CHECKING:
    from optuna.pruners import BasePruner


class Wilcoxon(PrunerSpec):
    """Optuna's ``WilcoxonPruner``, for studies with ``folds=K``: a trial reports each fold's value
    at step = fold index, and after each fold but the last it is pruned when a one-sided Wilcoxon
    signed-rank test over the folds both have says it is worse than the best trial's, at ``p``.

    The test's smallest p-value over n paired folds is 2^-n (every fold worse), so at ``p`` it can
    prune from fold ``ceil(log2(1/p))`` on: the fourth at 0.1; it never prunes a 3- or 4-fold trial
    (nothing is asked after the last fold, where pruning would save nothing). See docs/kfold.md.
    """

    name = "wilcoxon"
    options = {
        "p": Option(float, 0.1, "p-value below which a trial's folds are taken to be worse than the best trial's"),
        "startup": Option(int, 2, "folds a trial reports before it can be pruned (at least 2)"),
    }
    reads_running_trials = False  # this trial's values and the best complete trial's

    @classmethod
    def built_types(cls) -> tuple[type, ...]:
        import optuna

        return (optuna.pruners.WilcoxonPruner,)

    def check(self, search_epochs: int) -> None:
        if not 0 < self["p"] < 1:
            raise self.refuse("p is a probability between 0 and 1")
        if self["startup"] < 0:
            raise self.refuse("startup must be >= 0")

    def build(self, search_epochs: int) -> BasePruner:
        import warnings

        import optuna

        self.check(search_epochs)
        with warnings.catch_warnings():  # "experimental" since Optuna 3.6: said once per worker, to no one
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.pruners.WilcoxonPruner(p_threshold=self["p"], n_startup_steps=self["startup"])

    @classmethod
    def may_prune_at(cls, pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
        return True  # asked once a fold, by the caller, which skips the last fold

    def first_fold(self) -> int:
        """The first fold (1-based) after which this test can prune at all."""
        return max(2, self["startup"], math.ceil(math.log2(1 / self["p"]) - 1e-9))

    def describe(self) -> str:
        return (f"Wilcoxon signed-rank test of the folds against the best trial's (p < {self['p']:g}), "
                f"from fold {self.first_fold()} on")  # fmt: skip
