"""The bound on freeze-thaw's paused checkpoints (``asha:disk``): which paused trials lose theirs."""

from __future__ import annotations

import pytest

from search.exceptions import SearchError
from search.settings import parse_pruner
from search.settings._freeze_thaw import DiskSize, to_evict

MB = 10**6


def _rung_one(*values: float) -> dict[int, dict[int, float]]:
    return {n: {1: v} for n, v in enumerate(values)}


def test_nothing_goes_while_the_paused_checkpoints_fit():
    values = _rung_one(0.1, 0.2, 0.3, 0.4)
    assert to_evict(values, {2: 1, 3: 1}, {2: 5 * MB, 3: 5 * MB}, 10 * MB, 2) == []


def test_the_worst_in_its_rung_goes_first_and_only_as_many_as_needed():
    values = _rung_one(0.1, 0.2, 0.3, 0.4, 0.5, 0.6)  # rung 1, factor 2: trials 0-2 have earned it
    paused = {3: 1, 4: 1, 5: 1}
    sizes = dict.fromkeys(paused, 4 * MB)
    assert to_evict(values, paused, sizes, 8 * MB, 2) == [5]
    assert to_evict(values, paused, sizes, 4 * MB, 2) == [5, 4]
    assert to_evict(values, paused, sizes, 0, 2) == [5, 4, 3]
    assert to_evict(values, paused, sizes, 8 * MB, 2, maximize=True) == [3]  # now 5, 4, 3 are the best


def test_a_trial_that_earned_its_resumption_goes_only_when_the_others_are_not_enough():
    values = _rung_one(0.1, 0.2, 0.3, 0.4)  # factor 2: 0 and 1 have earned it
    paused = {1: 1, 3: 1}
    assert to_evict(values, paused, {1: 1 * MB, 3: 9 * MB}, 2 * MB, 2) == [3]
    assert to_evict(values, paused, {1: 9 * MB, 3: 1 * MB}, 2 * MB, 2) == [3, 1]


def test_standing_is_a_fraction_of_the_rung_then_the_lower_rung_goes_first():
    values = _rung_one(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
    values[0][3], values[1][3] = 0.05, 0.06  # rung 3: two trials
    paused = {1: 3, 5: 1}  # trial 1: 1 of 2 better at rung 3; trial 5: 5 of 8 better at rung 1
    assert to_evict(values, paused, dict.fromkeys(paused, MB), MB, 2) == [5]
    values[2][3], values[3][3] = 0.01, 0.02  # rung 3 now: 0.01, 0.02, 0.05, 0.06: trial 1 last
    assert to_evict(values, paused, dict.fromkeys(paused, MB), MB, 2) == [1]
    values[5][1] = 0.75  # 6 of 8 better at rung 1, as 3 of 4 at rung 3: the lower rung goes first
    assert to_evict(values, paused, dict.fromkeys(paused, MB), MB, 2) == [5]


def test_a_value_that_is_not_finite_ranks_last_and_a_trial_with_no_bytes_here_stays():
    values = {0: {1: 0.1}, 1: {1: float("nan")}, 2: {1: 0.3}, 3: {1: 0.2}}
    assert to_evict(values, {1: 1, 2: 1}, {1: MB, 2: MB}, MB, 2) == [1]
    assert to_evict(values, {1: 1, 2: 1}, {1: 0, 2: 3 * MB}, MB, 2) == [2]


def test_sizes_are_read_in_decimal_or_binary_units():
    assert DiskSize("20GB") == 20 * 10**9
    assert DiskSize("512MiB") == 512 * 2**20
    assert DiskSize("1.5 gb") == 1_500_000_000
    assert DiskSize("4096") == 4096
    for bad in ("", "GB", "20XB", "-1GB", "inf", "nan"):
        with pytest.raises(ValueError):
            DiskSize(bad)


def test_the_asha_pruner_carries_its_bound_and_refuses_a_bad_one_in_one_line():
    assert parse_pruner("asha").build(10).disk is None  # unbounded, by default
    assert parse_pruner("asha:disk=0").build(10).disk is None  # as said
    assert parse_pruner("asha:disk=2MB").build(10).disk == 2 * MB
    assert "within 0.002 GB" in parse_pruner("asha:disk=2MB").describe()
    with pytest.raises(SearchError, match="bad value 'lots' for pruner option asha:disk: expected a size such as 20GB"):
        parse_pruner("asha:disk=lots")
