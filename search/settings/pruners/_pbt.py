"""Population-based training (Jaderberg et al. 2017, asynchronous as in Ray Tune's scheduler).

Every ``interval`` epochs a trial ranks its value among the trials that reached that epoch; one in
the bottom ``quantile`` (once ``min_trials`` have reached it) is *replaced*: its worker copies the
newest checkpoint of a trial in the top ``quantile`` into its own trial's folder (weights, optimizer,
schedule: *exploit*), perturbs the study's mutable parameters (``mutable_params``: learning rate,
weight decay, dropout; each multiplied by ``1 ± perturb``, or drawn anew with probability
``resample``: *explore*) and queues the continuation of its logical trial with them, which goes on
from the copied epoch. In Optuna the replaced attempt ends PRUNED (``exploited_at``), the
continuation records its lineage (``pbt_parent``, ``pbt_epoch``, ``pbt_changes``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from search.settings._spec import Option, PrunerSpec

if TYPE_CHECKING:
    from optuna.pruners import BasePruner


class Pbt(PrunerSpec):
    name = "pbt"
    options = {
        "interval": Option(int, 2, "epochs between two exploit checks of a trial"),
        "quantile": Option(float, 0.25, "the bottom quantile is replaced by copies of the top quantile"),
        "min_trials": Option(int, 4, "trials that must have reached an epoch before one is replaced there"),
        "perturb": Option(float, 0.2, "explore: multiply each mutable parameter by 1 - perturb or 1 + perturb"),
        "resample": Option(float, 0.25, "explore: probability to draw a mutable parameter anew instead"),
    }
    reads_running_trials = True  # the values of running trials at the check epochs
    exploits = True

    @classmethod
    def built_types(cls) -> tuple[type, ...]:
        from search.settings._schedulers import PbtPruner

        return (PbtPruner,)

    def check(self, search_epochs: int) -> None:
        if self["interval"] < 1 or self["interval"] >= search_epochs:
            raise self.refuse(f"interval must be at least 1 and below the study's {search_epochs} search epochs")
        if not 0 < self["quantile"] <= 0.5:
            raise self.refuse("quantile must be above 0 and at most 0.5")
        if self["min_trials"] < 2:
            raise self.refuse("min_trials must be >= 2")
        if not 0 < self["perturb"] < 1 or self["resample"] > 1:
            raise self.refuse("perturb must be between 0 and 1, resample a probability")

    def check_study(self, study: Any, space: dict[str, Any]) -> None:
        from studies import mutable_params

        if not [p for p in mutable_params(study) if p in space]:
            raise self.refuse(f"it perturbs a study's mutable parameters, and study {getattr(study, 'name', '?')!r} "
                              "declares none in its search space (`mutable_params`, e.g. {'lr': 'lr'}: "
                              "docs/freeze-thaw.md)")  # fmt: skip

    def build(self, search_epochs: int) -> BasePruner:
        from search.settings._schedulers import PbtPruner

        self.check(search_epochs)
        v = self.values
        return PbtPruner(v["interval"], v["quantile"], v["min_trials"], v["perturb"], v["resample"], search_epochs)

    @classmethod
    def may_prune_at(cls, pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
        return step % pruner.interval == 0 and step < pruner.epochs

    def describe(self) -> str:
        v = self.values
        return (f"population-based training: every {v['interval']} epochs the bottom {v['quantile']:.0%} "
                f"copy a top {v['quantile']:.0%} trial's checkpoint and perturb its mutable parameters")  # fmt: skip
