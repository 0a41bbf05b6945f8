"""The lhs experiment (benchmarks/lhs_startup.py): TPE's start-up trials as Latin hypercubes."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from benchmarks.lhs_startup import LatinStartup, from_unit, lhs_study

SPACE = {
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "dropout": FloatDistribution(0.0, 1.0),
    "wd": FloatDistribution(0.0, 0.1, step=0.01),
    "layers": IntDistribution(1, 5),
    "units": IntDistribution(64, 1024, log=True),
    "act": CategoricalDistribution(["relu", "gelu", "tanh"]),
}


def test_each_block_puts_one_draw_in_each_slice_of_each_parameter():
    startup = LatinStartup(seed=3, block=10)
    for name in SPACE:
        for block in range(3):
            slices = sorted(int(startup.unit(name, block * 10 + i) * 10) for i in range(10))
            assert slices == list(range(10))
    # parameters and blocks are dealt their own permutations
    assert [startup.unit("lr", i) for i in range(10)] != [startup.unit("dropout", i) for i in range(10)]
    assert startup.unit("lr", 4) == LatinStartup(seed=3, block=10).unit("lr", 4)
    assert startup.unit("lr", 4) != LatinStartup(seed=4, block=10).unit("lr", 4)


@pytest.mark.parametrize("u", [0.0, 0.25, 0.5, 0.999999])
def test_every_value_lies_in_its_distribution(u):
    for dist in SPACE.values():
        assert dist._contains(dist.to_internal_repr(from_unit(u, dist)))
    assert math.isclose(from_unit(0.5, SPACE["lr"]), 10**-2.5)


def test_a_study_samples_its_first_trials_from_the_hypercube():
    class Problem:
        name, epochs = "toy", 3

    study = lhs_study(10)(Problem(), seed=0)
    for _ in range(10):
        trial = study.ask(SPACE)
        study.tell(trial, trial.params["dropout"])
    slices = sorted(int(t.params["dropout"] * 10) for t in study.trials)
    assert slices == list(range(10))
    trial = study.ask(SPACE)  # past the start-up: TPE's own choice
    assert 0.0 <= trial.params["dropout"] <= 1.0
    assert isinstance(study.sampler, optuna.samplers.BaseSampler)
