"""Helpers shared by the benchmark experiments' tests."""

from __future__ import annotations

from collections.abc import Callable

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState

X = FloatDistribution(0.0, 1.0)


def _numbered(state: TrialState, curve: list[float], x: float, number: int) -> FrozenTrial:
    trial = optuna.trial.create_trial(
        state=state, params={"x": x}, distributions={"x": X},
        intermediate_values={epoch: v for epoch, v in enumerate(curve, start=1)},
        value=curve[-1] if state == TrialState.COMPLETE else None,
    )  # fmt: skip
    trial.number = number
    return trial


@pytest.fixture
def numbered() -> Callable[[TrialState, list[float], float, int], FrozenTrial]:
    """A trial of one parameter ``x`` with this curve (epoch 1 first), state and number; a complete
    one's value is its last epoch's."""
    return _numbered
