"""The median rule decided from sorted step values (``IndexedMedian``) gives Optuna's ``MedianPruner``
answer to the bit: the same percentile as numpy, and the same decision on studies with missing
steps, NaN and infinite values, either direction, any startup, warm-up, interval and minimum."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import numpy as np
import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from optuna.trial import TrialState, create_trial

from search.settings._median_rule import IndexedMedian, percentile_of_sorted
from storage import StepValues

VALUES = hs.one_of(
    hs.floats(allow_nan=False, allow_infinity=True, width=64),
    hs.sampled_from([0.0, -0.0, 1.0, 1.0, 2.5, math.inf, -math.inf]),
)


def bits(x: float) -> bytes:
    """The float's bits; a zero's sign aside (which of 0.0 and -0.0 numpy's partition reads first is
    its own: equal values, the same decision)."""
    return struct.pack("<d", x + 0.0) if not math.isnan(x) else b"nan"


@settings(max_examples=400, deadline=None)
@given(values=hs.lists(VALUES, min_size=1, max_size=40), q=hs.sampled_from([50.0, 0.0, 100.0, 25.0, 33.3, 99.9]))
def test_the_percentile_of_sorted_values_is_numpys_to_the_bit(values, q):
    with np.errstate(invalid="ignore"):
        expected = float(np.nanpercentile(np.array(values, dtype=float), q))
    assert bits(percentile_of_sorted(sorted(values), q)) == bits(expected)


def test_no_values_have_no_percentile():
    assert math.isnan(percentile_of_sorted([], 50.0))


class _Indexed:
    """A study with its complete trials' values by step, as a worker's pruning hook hands it."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study
        self.direction = study.direction
        self.complete_steps = StepValues()
        for trial in study.get_trials(states=(TrialState.COMPLETE,)):
            self.complete_steps.add(trial.intermediate_values)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)


def _curve(rng: random.Random, epochs: int) -> dict[int, float]:
    special = [math.nan, math.inf, -math.inf, 0.5]
    return {step: rng.choice(special) if rng.random() < 0.04 else round(rng.gauss(1.0, 0.4), rng.choice([1, 6]))
            for step in range(epochs) if rng.random() > 0.1}  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
def test_decisions_are_the_median_pruners_on_random_studies(seed):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rng = random.Random(seed)
    decided = []
    for direction in ("minimize", "maximize"):
        study = optuna.create_study(direction=direction)
        for size in (0, 2, 6, 40):
            study.add_trials([create_trial(value=1.0, intermediate_values=_curve(rng, rng.randint(1, 12)))
                              for _ in range(size)])  # fmt: skip
            seen = _Indexed(study)
            for _ in range(40):
                options = {
                    "n_startup_trials": rng.choice([0, 1, 5, 20]),
                    "n_warmup_steps": rng.choice([0, 1, 3]),
                    "interval_steps": rng.choice([1, 2, 3]),
                    "n_min_trials": rng.choice([1, 3, 10, 60]),
                }
                running = create_trial(state=TrialState.RUNNING, intermediate_values=_curve(rng, rng.randint(0, 12)))
                expected = optuna.pruners.MedianPruner(**options).prune(study, running)
                assert IndexedMedian(**options).prune(seen, running) == expected, (options, running.intermediate_values)
                assert IndexedMedian(**options).prune(study, running) == expected  # without an index: Optuna's own
                decided.append(expected)
    assert True in decided and False in decided  # both answers were compared


def test_values_added_after_a_look_up_are_sorted_in():
    index = StepValues()
    index.add({0: 3.0, 1: math.nan})
    assert index.sorted_at(0) == [3.0] and index.reported(1) == 1 and index.sorted_at(1) == []
    index.add({0: 1.0})
    index.add({0: 2.0, 1: 5.0})
    assert index.sorted_at(0) == [1.0, 2.0, 3.0] and index.reported(1) == 2 and index.trials == 3
