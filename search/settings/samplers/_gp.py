"""A Gaussian-process sampler (Optuna's ``GPSampler``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.settings._spec import STARTUP, Option, SamplerSpec

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler


class Gp(SamplerSpec):
    name = "gp"
    uses_constraints = True
    options = {
        "startup": STARTUP,
        "pruned": Option(bool, True, "read each pruned trial as complete at the worst complete value (false: "
                         "Optuna's reading, which leaves pruned trials out)"),
    }  # fmt: skip

    def build(self, seed: int | None) -> BaseSampler:
        import optuna

        sampler = optuna.samplers.GPSampler(seed=seed, n_startup_trials=self["startup"])
        if not self["pruned"]:
            return sampler
        from search.settings._pruned_seen import PrunedAsWorst

        return PrunedAsWorst(sampler)

    def describe(self) -> str:
        pruned = ", pruned trials read as the worst complete one" if self["pruned"] else ""
        return f"Gaussian process ({self['startup']} random trials first{pruned})"
