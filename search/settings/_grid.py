"""Grid search over a study's declared space: which values each parameter takes, and in what order
the points run.

``--grid NAME=V1,V2,...`` gives a parameter's values (checked against its declared range or
choices); a categorical parameter without one takes all its choices, an integer one its whole range
when that has at most :data:`INT_RANGE_LIMIT` values; a continuous one must be given. The grid is
stored with the study (:class:`~search.settings.StudyRecord`), and its points are queued as the
study's trials when it is created: a claim pops a queued trial under the study lock, so each point
runs once however many workers there are, and a dead worker's retry runs the same point again.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from search.exceptions import SearchError
from search.settings._space import check_configuration

INT_RANGE_LIMIT = 32
"""An integer parameter without ``--grid`` values takes its whole range when it has at most this many values."""
MAX_POINTS = 100_000
"""The largest grid ``--sampler grid`` accepts (its points are listed and shuffled in memory)."""


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """``NAME=V1,V2,...`` items (``--grid``, repeatable) as ``{name: values}``; values are read as JSON
    where they can be (numbers, true/false), else kept as text (a categorical choice)."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name, values = name.strip(), [v.strip() for v in raw.split(",")]
        if not sep or not name or not all(values):
            raise SearchError(f"--grid {item!r}: expected NAME=V1,V2,..., e.g. --grid lr=0.001,0.01")
        if name in grid:
            raise SearchError(f"--grid {name} is given twice; list all its values in one --grid {name}=V1,V2,...")
        grid[name] = [_value(v) for v in values]
    return grid


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def resolve_grid(space: Mapping[str, str], given: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """Every parameter of ``space``, in its order, with its grid values: ``given`` ones cast to the
    parameter's type and checked against its range or choices (repeats dropped), else its choices
    or its whole integer range. One line naming the parameters that need ``--grid`` values."""
    from optuna.distributions import CategoricalDistribution, IntDistribution, json_to_distribution

    unknown = [name for name in given if name not in space]
    if unknown:
        raise SearchError(f"--grid {unknown[0]}: no such parameter; the study's parameters: {', '.join(space)}")
    grid: dict[str, list[Any]] = {}
    missing = []
    for name, text in space.items():
        dist = json_to_distribution(text)
        if name in given:
            values = [check_configuration(dict(space), {name: v}, "--grid")[name] for v in given[name]]
            grid[name] = list(dict.fromkeys(values))
            _check_steps(name, dist, grid[name])
        elif isinstance(dist, CategoricalDistribution):
            grid[name] = list(dist.choices)
        elif isinstance(dist, IntDistribution) and (dist.high - dist.low) // dist.step + 1 <= INT_RANGE_LIMIT:
            grid[name] = list(range(dist.low, dist.high + 1, dist.step))
        else:
            missing.append(name)
    if missing:
        kinds = ", ".join(f"{n} ({_declared(json_to_distribution(space[n]))})" for n in missing)
        example = " ".join(f"--grid {n}=V1,V2,..." for n in missing)
        raise SearchError(f"--sampler grid needs values for {kinds}: give them with {example}")
    size = grid_size(grid)
    if size > MAX_POINTS:
        raise SearchError(f"--sampler grid: {describe_grid(grid)}, more than {MAX_POINTS:,}; give fewer --grid values")
    return grid


def _declared(dist: Any) -> str:
    from optuna.distributions import IntDistribution

    if isinstance(dist, IntDistribution):
        return f"integers {dist.low}..{dist.high}, more than {INT_RANGE_LIMIT} values"
    return f"continuous {dist.low:g}..{dist.high:g}{', log scale' if dist.log else ''}"


def _check_steps(name: str, dist: Any, values: list[Any]) -> None:
    """A stepped parameter's values lie on its steps (Optuna would warn and store them anyway)."""
    step = getattr(dist, "step", None)
    if not step:
        return
    for value in values:
        if abs((value - dist.low) / step - round((value - dist.low) / step)) > 1e-9:
            raise SearchError(f"--grid: {name}={value} is not on the study's steps of {step:g} from {dist.low:g}")


def grid_size(grid: Mapping[str, Sequence[Any]]) -> int:
    size = 1
    for values in grid.values():
        size *= len(values)
    return size


def grid_points(grid: Mapping[str, Sequence[Any]], seed: int | None) -> list[dict[str, Any]]:
    """Every point of the grid once, in an order fixed by ``seed``: a budget below the grid's size
    runs the first points of it, a sample of the whole grid rather than its first corner."""
    names = list(grid)
    points = [dict(zip(names, values, strict=True)) for values in itertools.product(*grid.values())]
    random.Random(seed).shuffle(points)
    return points


def point_key(params: Mapping[str, Any]) -> str:
    """A point as text that is the same for its queued values and a trial's stored params."""
    return json.dumps(sorted(params.items()), default=str)


def describe_grid(grid: Mapping[str, Sequence[Any]]) -> str:
    """``12 points (values per parameter: act 2, lr 3, width 2)``, by name (the order a stored grid has)."""
    size = grid_size(grid)
    parts = ", ".join(f"{name} {len(grid[name])}" for name in sorted(grid))
    return f"{size:,} point{'s' * (size != 1)} (values per parameter: {parts or 'none'})"


def grid_differences(old: Mapping[str, Sequence[Any]], new: Mapping[str, Sequence[Any]]) -> str:
    """How two grids differ, per parameter (``lr: stored 0.01,0.1, given 0.01,0.2``); empty if they do not."""

    def show(grid: Mapping[str, Sequence[Any]], name: str) -> str:
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in grid[name]) if name in grid else "none"

    names = [n for n in dict.fromkeys([*old, *new]) if list(old.get(n, [])) != list(new.get(n, []))]
    return "; ".join(f"{n}: stored {show(old, n)}, given {show(new, n)}" for n in names)


def is_grid(sampler: str) -> bool:
    """Whether a ``--sampler`` spec is grid search."""
    return sampler.partition(":")[0].strip().lower() == "grid"
