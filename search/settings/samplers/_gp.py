"""A Gaussian-process sampler (Optuna's ``GPSampler``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.settings._spec import STARTUP, SamplerSpec

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler


class Gp(SamplerSpec):
    name = "gp"
    uses_constraints = True
    options = {"startup": STARTUP}

    def build(self, seed: int | None) -> BaseSampler:
        import optuna

        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=self["startup"])

    def describe(self) -> str:
        return f"Gaussian process ({self['startup']} random trials first)"
