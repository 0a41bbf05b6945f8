"""benchmarks/at_trials.py stops each search at the trial budget and pairs it with the reference.

Its numbers are read in docs/experiments/, never asserted: this checks that each search ends at
``--trials`` finished trials, that the one-process reference runs once per task and seed and is
paired with every worker count, and that ``--read`` tabulates what ``--out`` wrote.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("at_trials", ROOT / "benchmarks" / "at_trials.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["at_trials"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_searches_stop_at_the_trial_budget_and_pair_with_the_script(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    at_trials = _load()
    out = tmp_path / "rows.json"
    at_trials.main(["--tasks", "3945", "--workers", "1,2", "--seeds", "2", "--trials", "8",
                    "--strategies", "random,gp:startup=3+median:warmup=3+patience=off", "--out", str(out)])  # fmt: skip
    table = capsys.readouterr().out
    rows = __import__("json").loads(out.read_text())
    # The script once per seed (one process), each other strategy per worker count and seed.
    assert sorted((r["strategy"], r["workers"]) for r in rows if r["seed"] == 0) == [
        ("gp:startup=3+median:warmup=3+patience=off", 1), ("gp:startup=3+median:warmup=3+patience=off", 2),
        ("random", 1), ("random", 2), ("script", 1),
    ]  # fmt: skip
    assert {r["trials"] for r in rows} == {8}  # stopped at the budget, not trained on to 126 FTE
    assert all(r["epochs"] <= 8 * 52 for r in rows)
    random_rows = [line.split() for line in table.splitlines() if line.strip().startswith("random")]
    assert [row[1] for row in random_rows] == ["1", "2"]  # paired with the one-process script at both
    wins, losses = map(int, random_rows[0][2].split("-"))
    assert wins + losses <= 2
    assert "after 8 trials, against script" in table
    at_trials.main(["--read", str(out)])
    assert capsys.readouterr().out == table
