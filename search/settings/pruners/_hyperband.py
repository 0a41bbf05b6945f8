"""Hyperband: successive halving in brackets of different first rungs, a trial's bracket by its number."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from search.settings._spec import Option, PrunerSpec, new_rung

if TYPE_CHECKING:
    from optuna.pruners import BasePruner


class Hyperband(PrunerSpec):
    name = "hyperband"
    options = {
        "min": Option(int, 1, "epochs of the first rung"),
        "factor": Option(int, 3, "reduction factor: keep the top 1/factor at each rung"),
    }
    reads_running_trials = True  # the rung records of running trials

    @classmethod
    def built_types(cls) -> tuple[type, ...]:
        from search.settings._pruners import RetryAwareHyperband

        return (RetryAwareHyperband,)

    def check(self, search_epochs: int) -> None:
        self.check_factor()
        if self["min"] < 1:
            raise self.refuse("min must be >= 1 epoch")
        if self["min"] > search_epochs:
            raise self.refuse(f"min is above the study's {search_epochs} search epochs")

    def build(self, search_epochs: int) -> BasePruner:
        from search.settings._pruners import RetryAwareHyperband

        self.check(search_epochs)
        return RetryAwareHyperband(self["min"], search_epochs, self["factor"])

    @classmethod
    def may_prune_at(cls, pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
        # At an epoch that reaches a rung of any bracket that the last ask had not reached.
        from storage import min_resource, reduction_factor

        if last_asked is None:
            return True
        return new_rung(int(min_resource(pruner)), reduction_factor(pruner), step, last_asked)

    def describe(self) -> str:
        return f"Hyperband (keep 1/{self['factor']}, first rung at epoch {self['min']} in the most aggressive bracket)"
