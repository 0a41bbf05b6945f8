"""The freeze-thaw rule (ASHA in promotion mode): who goes on at a rung, and which paused trial resumes."""

from __future__ import annotations

import pytest

from search.settings._freeze_thaw import goes_on, logical_values, rungs, to_resume, top_at


def test_rungs_are_the_first_times_powers_of_the_factor_below_the_epochs():
    assert rungs(1, 3, 20) == [1, 3, 9]
    assert rungs(2, 2, 16) == [2, 4, 8]
    assert rungs(5, 3, 5) == []


def test_the_top_of_a_rung_is_a_factor_th_of_those_that_reached_it():
    values = {0: {1: 0.5}, 1: {1: 0.4}, 2: {1: 0.3}, 3: {2: 0.1}}  # trial 3 has no value at rung 1
    assert top_at(values, 1, 3) == {2}
    assert top_at(values, 1, 4) == set()  # fewer trials than the factor: nobody yet
    assert top_at(values, 1, 3, maximize=True) == {0}
    assert top_at({0: {1: float("nan")}, 1: {1: 0.2}, 2: {1: 0.3}}, 1, 2) == {1}  # NaN ranks nowhere


def test_a_trial_goes_on_only_in_the_top():
    values = {n: {1: float(n)} for n in range(6)}
    assert [goes_on(values, n, 1, 3) for n in range(6)] == [True, True, False, False, False, False]


def test_the_highest_rung_resumes_first_then_the_best_value():
    values = {n: {1: float(n)} for n in range(9)}  # rung 1: top 3 are 0, 1, 2
    values[0][3], values[1][3], values[5][3] = 0.9, 0.1, 0.5  # rung 3: top 1 is trial 1
    assert to_resume(values, {2: 1, 1: 3, 7: 1}, 3) == 1  # rung 3 before rung 1
    assert to_resume(values, {2: 1, 1: 1, 7: 1}, 3) == 1  # the best of rung 1's earned ones
    assert to_resume(values, {7: 1, 8: 1}, 3) is None  # not in the top: they stay paused
    assert to_resume(values, {}, 3) is None


@pytest.mark.parametrize("maximize", [False, True])
def test_a_paused_trial_earns_its_resumption_as_the_rung_fills(maximize):
    sign = -1 if maximize else 1
    values = {0: {1: sign * 0.5}, 1: {1: sign * 0.9}}
    assert to_resume(values, {0: 1, 1: 1}, 3, maximize) is None  # two trials: nobody in the top yet
    values[2] = {1: sign * 0.7}
    assert to_resume(values, {0: 1, 1: 1}, 3, maximize) == 0


def test_logical_values_merge_a_trials_attempts():
    class T:
        def __init__(self, number, values, failed_trial=None):
            self.number, self.intermediate_values = number, values
            self.system_attrs = {} if failed_trial is None else {"failed_trial": failed_trial}

    merged = logical_values([T(3, {1: 0.5, 2: 0.4, 3: 0.3}, failed_trial=0), T(0, {1: 0.5}), T(1, {1: 0.7})])
    assert merged == {0: {1: 0.5, 2: 0.4, 3: 0.3}, 1: {1: 0.7}}
