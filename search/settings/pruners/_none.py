"""No pruning: every trial runs its search epochs (or until ``--patience`` ends it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from search.settings._spec import PrunerSpec

if TYPE_CHECKING:
    from optuna.pruners import BasePruner


class NoPruning(PrunerSpec):
    name = "none"
    reads_running_trials = False

    @classmethod
    def built_types(cls) -> tuple[type, ...]:
        import optuna

        return (optuna.pruners.NopPruner,)

    def build(self, search_epochs: int) -> BasePruner:
        import optuna

        return optuna.pruners.NopPruner()

    @classmethod
    def may_prune_at(cls, pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
        return False  # never asked, not even at an attempt's first epoch

    def describe(self) -> str:
        return "no pruning"
