"""The grid of ``--sampler grid``: which values each parameter takes, and the order its points run in."""

from __future__ import annotations

import pytest

from search.exceptions import SearchError
from search.settings import describe_grid, grid_points, parse_grid, resolve_grid


def _space() -> dict[str, str]:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
        distribution_to_json,
    )

    dists = {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "depth": IntDistribution(1, 6),
        "act": CategoricalDistribution(["relu", "gelu"]),
        "width": IntDistribution(16, 1024, step=16),
    }
    return {name: distribution_to_json(d) for name, d in dists.items()}


def test_declared_choices_and_small_integer_ranges_fill_the_grid_and_given_values_are_cast():
    grid = resolve_grid(_space(), parse_grid(["lr=0.001,1e-2,0.001", "width=64,128"]))
    assert grid == {"lr": [0.001, 0.01], "depth": [1, 2, 3, 4, 5, 6], "act": ["relu", "gelu"], "width": [64, 128]}
    assert describe_grid(grid) == "48 points (values per parameter: act 2, depth 6, lr 2, width 2)"


def test_a_large_integer_range_and_a_continuous_parameter_need_values_in_one_line():
    with pytest.raises(SearchError) as err:
        resolve_grid(_space(), {})
    assert str(err.value) == (
        "--sampler grid needs values for lr (continuous 0.0001..0.1, log scale), width (integers 16..1024, more "
        "than 32 values): give them with --grid lr=V1,V2,... --grid width=V1,V2,..."
    )


@pytest.mark.parametrize(
    ("items", "said"),
    [
        (["lr"], "--grid 'lr': expected NAME=V1,V2,..., e.g. --grid lr=0.001,0.01"),
        (["lr=0.01,"], "--grid 'lr=0.01,': expected NAME=V1,V2,..."),
        (["lr=0.01", "lr=0.1"], "--grid lr is given twice; list all its values in one --grid lr=V1,V2,..."),
        (["lr=0.01", "width=64", "size=3"], "--grid size: no such parameter; the study's parameters: lr, depth"),
        (["lr=1", "width=64"], "--grid: lr=1 is outside the study's range 0.0001..0.1"),
        (["lr=0.01", "width=70"], "--grid: width=70 is not on the study's steps of 16 from 16"),
        (["lr=0.01", "width=64", "depth=2.5"], "--grid: depth must be a whole number, got 2.5"),
        (["lr=0.01", "width=64", "act=tanh"], "--grid: act='tanh' is not one of ['relu', 'gelu']"),
    ],
)
def test_bad_grid_values_are_one_line(items, said):
    with pytest.raises(SearchError) as err:
        resolve_grid(_space(), parse_grid(items))
    assert said in str(err.value) and "\n" not in str(err.value)


def test_the_order_is_every_point_once_fixed_by_the_seed():
    grid = {"a": [1, 2, 3], "b": ["x", "y"], "c": [0.5, 1.5]}
    points = grid_points(grid, seed=0)
    assert len(points) == 12 and len({tuple(p.values()) for p in points}) == 12
    assert grid_points(grid, seed=0) == points
    assert grid_points(grid, seed=1) != points  # another sample of the grid for a budget below its size
