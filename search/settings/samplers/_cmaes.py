"""CMA-ES (Optuna's ``CmaEsSampler``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.settings._spec import Option, SamplerSpec

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler


class CmaEs(SamplerSpec):
    name = "cmaes"
    multi_objective = False
    options = {
        "startup": Option(int, 1, "trials sampled at random before CMA-ES starts"),
        "sigma": Option(float, 0.0, "initial step size; 0: a sixth of each range"),
    }

    def build(self, seed: int | None) -> BaseSampler:
        import optuna

        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=self["startup"], sigma0=self["sigma"] or None)

    def describe(self) -> str:
        return "CMA-ES"
