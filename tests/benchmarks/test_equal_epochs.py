"""Pairing strategies at equal trials and at equal epochs (``benchmarks/equal_epochs.py``)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.equal_epochs import best_at, compare, main


def _trace(strategy: str, seed: int, points: list[tuple[int, float]]) -> dict:
    """(epochs so far, best so far) at each finished trial, as traces.json holds them."""
    events = [{"seconds": i, "epochs": e, "trials": i, "best": b} for i, (e, b) in enumerate(points, 1)]
    return {"strategy": strategy, "seed": seed, "events": events}


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
    [row] = [line for line in lines if line.strip().startswith("pbt")]
    assert row.split()[1:] == ["2-0", "1-1"]
    (tmp_path / "traces.json").write_text(json.dumps(traces))
    main([str(tmp_path / "traces.json"), "--reference", "script"])
    assert "1-1" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no strategy 'default'"):
        compare(traces, "default")
