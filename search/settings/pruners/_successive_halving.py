"""Successive halving: at each rung, keep the top 1/factor of the trials that reached it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from search.settings._spec import CONF, RHO, Option, PrunerSpec, new_rung

if TYPE_CHECKING:
    from optuna.pruners import BasePruner


class SuccessiveHalving(PrunerSpec):
    name = "successive-halving"
    options = {
        "min": Option(int, 1, "epochs of the first rung; auto: the first epoch that ranks trials", auto=True),
        "factor": Option(int, 3, "reduction factor: keep the top 1/factor at each rung"),
        "rate": Option(int, 0, "minimum early-stopping rate: the first rung is at min * factor**rate epochs"),
        "bootstrap": Option(int, 0, "trials a rung needs before it prunes"),
        "startup": Option(int, 10, "with min=auto: complete trials before the first rung is chosen"),
        "rho": RHO,
        "conf": CONF,
    }
    reads_running_trials = True  # the rung records of running trials

    @classmethod
    def built_types(cls) -> tuple[type, ...]:
        from search.settings._pruners import AdaptiveSuccessiveHalving, RetryAwareSuccessiveHalving

        return RetryAwareSuccessiveHalving, AdaptiveSuccessiveHalving

    def check(self, search_epochs: int) -> None:
        self.check_factor()
        self.check_ranking()
        if self["min"] != "auto" and self["min"] < 1:
            raise self.refuse("min must be >= 1 epoch")

    def build(self, search_epochs: int) -> BasePruner:
        from search.settings._pruners import AdaptiveSuccessiveHalving, RetryAwareSuccessiveHalving

        self.check(search_epochs)
        opts = self.values
        if opts["min"] == "auto":
            return AdaptiveSuccessiveHalving(
                opts["factor"], opts["bootstrap"], max(3, opts["startup"]), opts["rho"], opts["conf"]
            )
        return RetryAwareSuccessiveHalving(opts["min"], opts["factor"], opts["rate"], opts["bootstrap"])

    @classmethod
    def may_prune_at(cls, pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
        # At an epoch that reaches a rung the last ask had not reached: an ask that does not prune
        # passes every rung up to its epoch. With min=auto, every epoch until the first rung is known.
        from search.settings._pruners import AdaptiveSuccessiveHalving

        if last_asked is None:
            return True
        if type(pruner) is AdaptiveSuccessiveHalving:
            if pruner._min is None:
                return True
            return new_rung(pruner._min, pruner._factor, step, last_asked)
        from storage import min_early_stopping_rate, min_resource, reduction_factor

        factor = reduction_factor(pruner)
        first = int(min_resource(pruner)) * factor ** min_early_stopping_rate(pruner)
        return new_rung(first, factor, step, last_asked)

    def describe(self) -> str:
        first = "the first epoch that ranks trials" if self["min"] == "auto" else f"epoch {self['min']}"
        return f"successive halving (keep 1/{self['factor']}) from {first}"
