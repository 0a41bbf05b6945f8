"""Quasi-random search on a low-discrepancy sequence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.settings._spec import Option, SamplerSpec

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler


class Qmc(SamplerSpec):
    name = "qmc"
    options = {
        "type": Option(str, "sobol", "low-discrepancy sequence", ("sobol", "halton")),
        "scramble": Option(bool, True, "randomise the sequence (with --seed)"),
    }

    def build(self, seed: int | None) -> BaseSampler:
        import optuna

        return optuna.samplers.QMCSampler(seed=seed, qmc_type=self["type"], scramble=self["scramble"])

    def describe(self) -> str:
        return f"quasi-random {self['type']}"
