"""A study's search space, recorded by running its ``suggest`` against a recording trial."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from search.exceptions import SearchError


class SpaceRecorder:
    """Duck-types the parts of ``optuna.Trial`` a ``suggest`` uses; records each distribution."""

    number = -1

    def __init__(self) -> None:
        self.space: dict[str, str] = {}
        self.user_attrs: dict[str, Any] = {}
        self.params: dict[str, Any] = {}

    def _record(self, name: str, dist: Any) -> None:
        from optuna.distributions import distribution_to_json

        self.space[name] = distribution_to_json(dist)

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        from optuna.distributions import FloatDistribution

        self._record(name, FloatDistribution(low, high, step=step, log=log))
        return low

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        from optuna.distributions import IntDistribution

        self._record(name, IntDistribution(low, high, step=step, log=log))
        return low

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        from optuna.distributions import CategoricalDistribution

        self._record(name, CategoricalDistribution(list(choices)))
        return choices[0]

    def set_user_attr(self, key: str, value: Any) -> None:
        self.user_attrs[key] = value

    def report(self, value: float, step: int) -> None:  # pragma: no cover - suggest should not report
        pass


def record_space(study: Any) -> dict[str, str]:
    recorder = SpaceRecorder()
    study.suggest(recorder)
    return recorder.space


def space_differences(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Names of parameters declared by both spaces with different distributions."""
    return sorted(k for k in old.keys() & new.keys() if json.loads(old[k]) != json.loads(new[k]))


def middle_params(study: Any, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A value for every parameter of the study's space: ``overrides`` (cast to the parameter's
    type), else the middle of its range (geometric for a log scale) or its first choice.

    Raises:
        ValueError: an override names no parameter of the space.
    """
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
        json_to_distribution,
    )

    overrides = dict(overrides or {})
    space = {name: json_to_distribution(text) for name, text in record_space(study).items()}
    unknown = sorted(set(overrides) - set(space))
    if unknown:
        raise ValueError(f"no parameter {', '.join(unknown)} in the study's space ({', '.join(space)})")
    values: dict[str, Any] = {}
    for name, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            given = overrides.get(name, dist.choices[0])
            values[name] = next((c for c in dist.choices if str(c) == str(given)), given)
            continue
        assert isinstance(dist, FloatDistribution | IntDistribution)
        low, high = float(dist.low), float(dist.high)
        middle = (low * high) ** 0.5 if dist.log else (low + high) / 2
        value = float(overrides.get(name, middle))
        step = getattr(dist, "step", None) or (0 if isinstance(dist, FloatDistribution) else 1)
        if step and name not in overrides:  # onto the parameter's grid
            value = low + round((value - low) / step) * step
        values[name] = value if isinstance(dist, FloatDistribution) else int(round(value))
    return values


class NarrowedTrial:
    """A trial whose numeric parameters in ``ranges`` are drawn from the intersection of the study's
    range and the narrowed one (``--narrow lr=1e-4:3e-3``); everything else goes to ``trial``."""

    def __init__(self, trial: Any, ranges: Mapping[str, Sequence[float]]) -> None:
        self._trial, self._ranges = trial, ranges

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)

    def _narrowed(self, name: str, low: float, high: float) -> tuple[float, float]:
        if name not in self._ranges:
            return low, high
        lo, hi = self._ranges[name]
        new_low, new_high = max(low, lo), min(high, hi)
        if new_low > new_high:
            raise ValueError(f"--narrow {name}={lo:g}:{hi:g} is outside the study's range {low:g}:{high:g}")
        return new_low, new_high

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:  # fmt: skip
        low, high = self._narrowed(name, low, high)
        return float(self._trial.suggest_float(name, low, high, step=step, log=log))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        new_low, new_high = self._narrowed(name, low, high)
        return int(self._trial.suggest_int(name, int(math.ceil(new_low)), int(new_high), step=step, log=log))


class NarrowedStudy:
    """A study whose ``suggest`` sees a :class:`NarrowedTrial`; every other attribute is the study's."""

    def __init__(self, study: Any, ranges: Mapping[str, Sequence[float]]) -> None:
        self._study, self.narrow = study, ranges

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def suggest(self, trial: Any) -> Any:
        return self._study.suggest(NarrowedTrial(trial, self.narrow))


def parse_narrow(items: Sequence[str]) -> dict[str, list[float]]:
    """``NAME=LOW:HIGH`` items as ``{name: [low, high]}``."""
    ranges: dict[str, list[float]] = {}
    for item in items:
        name, _, bounds = item.partition("=")
        low, _, high = bounds.partition(":")
        try:
            values = [float(low), float(high)]
        except ValueError:
            raise ValueError(f"--narrow {item!r}: expected NAME=LOW:HIGH, e.g. lr=1e-4:3e-3") from None
        if not name or values[0] > values[1]:
            raise ValueError(f"--narrow {item!r}: expected NAME=LOW:HIGH with LOW <= HIGH")
        ranges[name.strip()] = values
    return ranges


def check_narrow(study: Any, ranges: dict[str, list[float]]) -> None:
    """Every narrowed name is a numeric parameter of the study, and each range meets the study's."""
    from optuna.distributions import CategoricalDistribution, json_to_distribution

    space = {name: json_to_distribution(text) for name, text in record_space(study).items()}
    for name in ranges:
        if name not in space or isinstance(space[name], CategoricalDistribution):
            numeric = ", ".join(n for n, d in space.items() if not isinstance(d, CategoricalDistribution))
            raise ValueError(f"--narrow: no numeric parameter {name!r} in the study's space ({numeric})")
    record_space(NarrowedStudy(study, ranges))  # raises for a range outside the study's


def check_configuration(space: dict[str, str], config: dict[str, Any], where: str) -> dict[str, Any]:
    """``config`` cast to the space's types; one line naming the parameter when it is not in the space."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
        json_to_distribution,
    )

    checked = {}
    for name, value in config.items():
        if name not in space:
            raise SearchError(f"{where}: {name!r} is no parameter of the study; its parameters: {', '.join(space)}")
        dist = json_to_distribution(space[name])
        if isinstance(dist, CategoricalDistribution):
            if value not in dist.choices:
                raise SearchError(f"{where}: {name}={value!r} is not one of {list(dist.choices)}")
            checked[name] = value
            continue
        assert isinstance(dist, FloatDistribution | IntDistribution)
        number = _number(value, float if isinstance(dist, FloatDistribution) else int, f"{where}: {name}")
        if not dist.low <= number <= dist.high:
            raise SearchError(f"{where}: {name}={value} is outside the study's range {dist.low:g}..{dist.high:g}")
        checked[name] = number
    return checked


def _number(value: Any, kind: type, what: str) -> Any:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if number != number or isinstance(value, bool) or (kind is int and not number.is_integer()):
        raise SearchError(f"{what} must be {'a whole number' if kind is int else 'a number'}, got {value!r}")
    return kind(number)
