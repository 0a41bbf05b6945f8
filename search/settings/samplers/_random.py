"""Random search."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.settings._spec import SamplerSpec

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler


class Random(SamplerSpec):
    name = "random"

    def build(self, seed: int | None) -> BaseSampler:
        import optuna

        return optuna.samplers.RandomSampler(seed=seed)

    def describe(self) -> str:
        return "random search"
