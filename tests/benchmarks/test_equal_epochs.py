"""Pairing strategies at equal trials and at equal epochs (``benchmarks/equal_epochs.py``)."""

from __future__ import annotations

import json
import math
import re

import pytest

from benchmarks.equal_epochs import best_at, compare, main, sign_test


def _trace(strategy: str, seed: int, points: list[tuple[int, float]], **where: object) -> dict:
    """(epochs so far, best so far) at each finished trial, as traces.json holds them."""
    events = [{"seconds": i, "epochs": e, "trials": i, "best": b} for i, (e, b) in enumerate(points, 1)]
    return {"strategy": strategy, "seed": seed, "events": events, **where}


def _row(lines: list[str], name: str, workers: int | None = None) -> list[str]:
    """A strategy's paired counts: equal trials, equal epochs, the reference's compute."""
    [row] = [line for line in lines if line.strip().startswith(name) and (workers is None or f"W={workers} " in line)]
    return re.findall(r"(\d+-\d+) \(", row)


def test_the_best_at_an_epoch_budget_is_the_last_found_within_it():
    trace = _trace("x", 0, [(10, math.inf), (20, 0.5), (35, 0.3)])
    assert best_at(trace) == 0.3 and best_at(trace, 34) == 0.5 and best_at(trace, 20) == 0.5
    assert best_at(trace, 5) == math.inf


def test_a_strategy_that_wins_by_training_more_loses_at_equal_epochs(tmp_path, capsys):
    traces = [
        _trace("script", 0, [(10, 0.6), (20, 0.4)]),
        _trace("pbt", 0, [(10, 0.7), (20, 0.5), (40, 0.2)]),  # best at 40 epochs, worse at 20
        _trace("script", 1, [(10, 0.6), (20, 0.5)]),
        _trace("pbt", 1, [(10, 0.3), (30, 0.2)]),  # better at any budget
    ]
    lines = compare(traces, "script")
    assert _row(lines, "pbt") == ["2-0", "1-1", "1-1"]
    [median] = [line.split() for line in lines if "median" in line.split()]
    assert median[-2:] == ["0.45", "0.2"]  # the script's 0.4 and 0.5, pbt's 0.2 and 0.2
    (tmp_path / "traces.json").write_text(json.dumps(traces))
    main([str(tmp_path / "traces.json"), "--reference", "script"])
    assert "1-1" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no strategy 'default'"):
        compare(traces, "default")


def test_a_one_process_reference_pairs_with_every_worker_count_and_each_problem_apart():
    traces = [
        _trace("script", 0, [(10, 0.5)], problem="a", workers=2),
        _trace("script", 0, [(10, 0.5)], problem="b", workers=2),
        _trace("default", 0, [(10, 0.4)], problem="a", workers=1),
        _trace("default", 0, [(10, 0.6)], problem="a", workers=2),
        _trace("default", 0, [(10, 0.6)], problem="b", workers=2),
    ]
    lines = compare(traces, "script", summary=True)
    assert _row(lines, "default", 1) == ["1-0", "1-0", "1-0"]
    assert _row(lines, "default", 2) == ["0-2", "0-2", "0-2"]
    # a reference run at two worker counts pairs only with its own
    traces.append(_trace("script", 0, [(10, 0.1)], problem="a", workers=1))
    assert _row(compare(traces, "script", summary=True), "default", 1) == ["0-1", "0-1", "0-1"]


def test_given_the_references_compute_a_strategy_runs_on_past_the_trial_budget():
    """Short trials lose at two trials and win with the epochs the script spent on its two."""
    traces = [
        _trace("script", 0, [(10, 0.5), (20, 0.4), (30, 0.1)]),
        _trace("short", 0, [(3, 0.6), (6, 0.5), (9, 0.45), (12, 0.3), (40, 0.05)]),
    ]
    assert _row(compare(traces, "script", trials=2), "short") == ["0-1", "1-0", "1-0"]  # the script had none by 6
    assert "(4 trials)" in compare(traces, "script", trials=2)[-1]
    assert _row(compare(traces, "script"), "short") == ["1-0", "0-1", "0-1"]


def test_the_sign_test_is_two_sided_and_exact():
    assert sign_test(0, 0) == 1.0 and sign_test(3, 3) == 1.0
    assert sign_test(5, 0) == sign_test(0, 5) == 2 / 32
