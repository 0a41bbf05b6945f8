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


@pytest.mark.parametrize("maximize", [False, True])
def test_once_the_budget_has_started_the_best_of_each_rung_goes_on(maximize):
    """With the budget's trials all started no rung fills any more: the best trial there goes on even
    below ``factor`` trials (else a budget under factor**rungs ends with every trial paused), once."""
    sign = -1 if maximize else 1
    values = {0: {1: sign * 0.5, 3: sign * 0.4}, 1: {1: sign * 0.9}, 2: {1: sign * 0.7}}  # 0 went on at rung 1
    assert to_resume(values, {0: 3, 1: 1, 2: 1}, 3, maximize) is None  # 1 at rung 3, 0 of rung 1's rest
    assert to_resume(values, {0: 3, 1: 1, 2: 1}, 3, maximize, spent=True) == 0  # the highest rung's best
    # Rung 1's quota (one) went to trial 0: the other two stay paused, spent or not.
    assert to_resume(values, {1: 1, 2: 1}, 3, maximize, spent=True) is None
    values = {1: {1: sign * 0.9}, 2: {1: sign * 0.7}}  # two trials, neither gone on
    assert to_resume(values, {1: 1, 2: 1}, 3, maximize, spent=True) == 2


def test_once_the_budget_has_started_the_best_at_a_rung_goes_on_rather_than_pause():
    """Paused, it would be the trial resumed at once (``to_resume`` with ``spent``): it goes on."""
    values = {0: {1: 0.5}, 1: {1: 0.4}}  # two trials at rung 1, factor 3: no top yet
    assert not goes_on(values, 1, 1, 3) and goes_on(values, 1, 1, 3, spent=True)
    assert not goes_on(values, 0, 1, 3, spent=True)  # not the best: it pauses, and would stay paused
    assert to_resume(values, {1: 1}, 3, spent=True) == 1 and to_resume(values, {0: 1}, 3, spent=True) is None


def test_the_budget_has_started_once_as_many_logical_trials_as_it_holds_were_taken():
    from types import SimpleNamespace

    from search.settings._freeze_thaw import BUDGET_ATTR, STOPPED_ATTR, budget_started

    def trial(number, state, failed_trial=None):
        attrs = {} if failed_trial is None else {"failed_trial": failed_trial}
        return SimpleNamespace(number=number, state=SimpleNamespace(name=state), system_attrs=attrs)

    queued = [trial(0, "COMPLETE"), trial(1, "WAITING")]  # a queued trial no worker took yet
    retried = [trial(0, "FAIL"), trial(1, "RUNNING"), trial(2, "WAITING", failed_trial=0)]
    assert not budget_started({BUDGET_ATTR: 2}, queued)
    assert budget_started({BUDGET_ATTR: 2}, retried)  # a waiting retry continues a started trial
    assert not budget_started({BUDGET_ATTR: 3}, retried)
    assert not budget_started({BUDGET_ATTR: 2, STOPPED_ATTR: "--timeout"}, retried)  # paused ones stay paused
    assert not budget_started({}, retried)  # no budget: a simulator's study


def test_logical_values_merge_a_trials_attempts():
    class T:
        def __init__(self, number, values, failed_trial=None):
            self.number, self.intermediate_values = number, values
            self.system_attrs = {} if failed_trial is None else {"failed_trial": failed_trial}

    merged = logical_values([T(3, {1: 0.5, 2: 0.4, 3: 0.3}, failed_trial=0), T(0, {1: 0.5}), T(1, {1: 0.7})])
    assert merged == {0: {1: 0.5, 2: 0.4, 3: 0.3}, 1: {1: 0.7}}


class _Attempt:
    def __init__(self, number, params, logical=None, **user_attrs):
        self.number, self.params, self.user_attrs = number, params, user_attrs
        self.system_attrs = {} if logical is None else {"failed_trial": logical}


def test_the_lineage_of_a_pbt_trial_follows_its_copies_back_to_a_first_attempt():
    """Trial 0 trained lr 1 to epoch 2; trial 1 (lr 2) was replaced at 2 by a copy of 0 with lr 3;
    that copy was replaced at 4 by a copy of trial 2, which had itself gone on from trial 0 at 2."""
    from search.settings._freeze_thaw import lineage, trained_at

    trials = [
        _Attempt(0, {"lr": 1}), _Attempt(1, {"lr": 2}), _Attempt(2, {"lr": 5}),
        _Attempt(3, {"lr": 3}, logical=1, pbt_parent=0, pbt_epoch=2),
        _Attempt(4, {"lr": 4}, logical=2, pbt_parent=0, pbt_epoch=2),
        _Attempt(5, {"lr": 6}, logical=1, pbt_parent=2, pbt_epoch=4),
    ]  # fmt: skip
    assert trained_at(trials, 2, 4).number == 4  # trial 2's epoch 4: its copy's
    assert trained_at(trials, 2, 2).number == 0  # trial 2's epoch 2 is trial 0's checkpoint, copied
    assert lineage(trials, trials[5]) == [(0, {"lr": 1}), (2, {"lr": 4}), (4, {"lr": 6})]
    assert lineage(trials, trials[0]) == [(0, {"lr": 1})]
    same = [_Attempt(0, {"lr": 1}), _Attempt(1, {"lr": 1}, logical=1, pbt_parent=0, pbt_epoch=2)]
    assert lineage(same, same[1]) == [(0, {"lr": 1})]  # a copy without a change: one segment


def test_a_replayed_schedule_is_scaled_to_the_full_epochs():
    from search.tracking._replay import scale_schedule

    schedule = [(0, {"lr": 1}), (2, {"lr": 2}), (3, {"lr": 3})]
    assert scale_schedule(schedule, 4, 8) == [(0, {"lr": 1}), (4, {"lr": 2}), (6, {"lr": 3})]
    assert scale_schedule(schedule, 4, 2) == [(0, {"lr": 1}), (1, {"lr": 3})]  # 2 and 3 both land at 1
