"""NSGA-II (Optuna's ``NSGAIISampler``): a genetic algorithm over the Pareto front, for several objectives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.settings._spec import Option, SamplerSpec

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler


class Nsga2(SamplerSpec):
    name = "nsga2"
    uses_constraints = True
    options = {
        "population": Option(int, 50, "trials per generation (the first generation is random)"),
        "mutation": Option(float, 0.0, "probability of mutating each parameter; 0: 1 / the number of parameters"),
        "crossover": Option(float, 0.9, "probability of a crossover for each child"),
    }

    def build(self, seed: int | None) -> BaseSampler:
        import optuna

        return optuna.samplers.NSGAIISampler(
            seed=seed, population_size=max(2, self["population"]), mutation_prob=self["mutation"] or None,
            crossover_prob=self["crossover"],
        )  # fmt: skip

    def describe(self) -> str:
        return f"NSGA-II (generations of {self['population']} trials)"
