"""The median rule: prune a trial whose value is worse than the median of the others' at the same epoch."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from search.settings._spec import CONF, RHO, Option, PrunerSpec

if TYPE_CHECKING:
    from optuna.pruners import BasePruner


class Median(PrunerSpec):
    name = "median"
    options = {
        "startup": Option(int, 5, "complete trials before anything is pruned"),
        "warmup": Option(int, 1, "epochs a trial runs before it can be pruned; auto: the first that ranks", auto=True),
        "interval": Option(int, 1, "epochs between pruning checks"),
        "min_trials": Option(int, 1, "trials that must have reported an epoch before it is compared"),
        "rho": RHO,
        "conf": CONF,
    }
    reads_running_trials = False  # this trial's values and the complete trials'

    @classmethod
    def built_types(cls) -> tuple[type, ...]:
        import optuna

        from search.settings._median_rule import IndexedMedian
        from search.settings._pruners import AdaptiveMedian

        return optuna.pruners.MedianPruner, IndexedMedian, AdaptiveMedian

    def check(self, search_epochs: int) -> None:
        self.check_ranking()
        if self["warmup"] != "auto" and (self["interval"] < 1 or self["min_trials"] < 1):
            raise self.refuse("interval and min_trials must be >= 1")

    def build(self, search_epochs: int) -> BasePruner:
        from search.settings._median_rule import IndexedMedian
        from search.settings._pruners import AdaptiveMedian

        self.check(search_epochs)
        opts = self.values
        if opts["warmup"] == "auto":
            return AdaptiveMedian(
                opts["startup"], opts["rho"], max(1, opts["interval"]), max(1, opts["min_trials"]), opts["conf"]
            )
        return IndexedMedian(
            n_startup_trials=opts["startup"], n_warmup_steps=opts["warmup"], interval_steps=opts["interval"],
            n_min_trials=opts["min_trials"],
        )  # fmt: skip

    @classmethod
    def may_prune_at(cls, pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
        # A fixed warm-up: Optuna's own rule, from the warm-up on, at the first epoch of each interval.
        # The adaptive one's warm-up follows the complete trials: every epoch.
        import optuna

        if last_asked is None or not isinstance(pruner, optuna.pruners.MedianPruner):
            return True
        from storage import interval_steps, is_first_in_interval_step, warmup_steps

        warmup, interval = warmup_steps(pruner), interval_steps(pruner)
        return step >= warmup and is_first_in_interval_step(step, steps, warmup, interval)

    def describe(self) -> str:
        p = self.values
        sure = f" at {p['conf']:.0%} confidence" if p["conf"] > 0.5 else ""
        start = (f"the first epoch that ranks the complete trials (Spearman >= {p['rho']:g}{sure})"
                 if p["warmup"] == "auto" else f"epoch {p['warmup']}")  # fmt: skip
        return f"median rule from {start}, after {p['startup']} complete trials"
