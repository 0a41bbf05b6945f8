"""Experiment: the default TPE with its random start-up trials drawn as Latin hypercubes.

TPE's first trials are independent uniform draws; with one model per parameter (the default beside
running trials) what it then learns from are those draws' marginals. Here each parameter's
start-up draws are stratified in blocks of ``block`` consecutive trial numbers: in each block,
every one of ``block`` equal slices of the parameter's range (in its own scale: log if log) gets
exactly one draw, the slices dealt to the trials by a permutation of their own per parameter and
block. A draw depends only on the seed, the parameter's name and the trial's number, so parallel
workers need no shared state. Measured in docs/search-strategy.md; not part of the product.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution


class LatinStartup(optuna.samplers.RandomSampler):
    def __init__(self, seed: int, block: int) -> None:
        super().__init__(seed=seed)
        self._seed, self._block = seed, block

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: BaseDistribution) -> Any:
        return from_unit(self.unit(param_name, trial.number), param_distribution)

    def unit(self, name: str, number: int) -> float:
        block, index = divmod(number, self._block)
        key = hashlib.sha256(f"{self._seed}/{name}/{block}".encode()).digest()
        rng = random.Random(key)
        strata = list(range(self._block))
        rng.shuffle(strata)
        jitter = [rng.random() for _ in range(self._block)]
        return (strata[index] + jitter[index]) / self._block


def from_unit(u: float, dist: BaseDistribution) -> Any:
    """The value at ``u`` in [0, 1) of ``dist``'s range, in its own scale."""
    if isinstance(dist, CategoricalDistribution):
        return dist.choices[min(len(dist.choices) - 1, int(u * len(dist.choices)))]
    if isinstance(dist, IntDistribution):
        if dist.log:
            lo, hi = math.log(dist.low - 0.5 + 1e-9), math.log(dist.high + 0.5)  # a log scale has low >= 1
            value = round(math.exp(lo + u * (hi - lo)))
        else:
            value = dist.low + int(u * ((dist.high - dist.low) // dist.step + 1)) * dist.step
        return int(min(dist.high, max(dist.low, value)))
    if isinstance(dist, FloatDistribution):
        if dist.log:
            lo, hi = math.log(dist.low), math.log(dist.high)
            return float(min(dist.high, math.exp(lo + u * (hi - lo))))
        if dist.step is not None:
            steps = int(round((dist.high - dist.low) / dist.step))
            return float(dist.low + min(steps, int(u * (steps + 1))) * dist.step)
        return float(dist.low + u * (dist.high - dist.low))
    raise TypeError(f"no unit mapping for {dist!r}")


def lhs_study(block: int) -> Any:
    """A strategy's study builder: the default strategy, its TPE's start-up trials Latin hypercubes."""
    from search.settings import SearchSettings, make_pruner, make_sampler
    from search.settings._samplers import ByConcurrency

    default = SearchSettings()

    def build(problem: Any, seed: int) -> optuna.Study:
        sampler = make_sampler(default.sampler, seed)
        if not isinstance(sampler, ByConcurrency):
            raise SystemExit(f"lhs wraps the default ByConcurrency TPE; the default is now {default.sampler!r}")
        startup = LatinStartup(seed, block)
        sampler.alone._random_sampler = sampler.together._random_sampler = startup
        return optuna.create_study(study_name=problem.name, sampler=sampler,
                                   pruner=make_pruner(default.pruner, problem.epochs))  # fmt: skip

    return build
