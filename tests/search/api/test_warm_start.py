"""`--warm-start-from STUDY`: a new study runs an earlier study's best configurations first, mapped
onto its own space (what it does not admit is left to the sampler)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from search.api._warm_start import fit_to_space

SLEEP = Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py"
SPACE = {
    "lr": json.dumps(
        {"name": "FloatDistribution", "attributes": {"low": 1e-5, "high": 0.1, "log": True, "step": None}}
    ),
    "depth": json.dumps({"name": "IntDistribution", "attributes": {"low": 1, "high": 4, "log": False, "step": 1}}),
    "act": json.dumps({"name": "CategoricalDistribution", "attributes": {"choices": ["relu", "gelu"]}}),
}


def test_a_configuration_keeps_what_the_space_admits_and_leaves_the_rest_to_the_sampler():
    kept, dropped = fit_to_space(SPACE, {"lr": 0.01, "depth": 3, "act": "gelu"})
    assert (kept, dropped) == ({"lr": 0.01, "depth": 3, "act": "gelu"}, [])
    kept, dropped = fit_to_space(SPACE, {"lr": 0.3, "depth": 2, "act": "tanh", "width": 64})
    assert kept == {"depth": 2}  # lr, act: values this space does not admit; width: no parameter here
    assert dropped == ["lr=0.3 (outside the study's range 1e-05..0.1)", "act='tanh' (not one of ['relu', 'gelu'])",
                       "width (not a parameter here)"]  # fmt: skip


@pytest.mark.slow
def test_a_new_study_runs_the_earlier_studys_best_first_and_an_existing_one_is_refused(cli, tmp_path, warm_cli):
    common = ["--study", str(SLEEP), "--study-option", "epoch_seconds=0", "--no-retrain", "--pruner", "none"]
    cli("start", *common, "--name", "src", "--trials", "4", "--workers", "1", cwd=tmp_path, check=True)
    src = json.loads(warm_cli("trials", "--name", "src", "--json", cwd=tmp_path, check=True).stdout)
    best = sorted((r for r in src if r["state"] == "COMPLETE"), key=lambda r: (r["value"], r["number"]))[:2]
    dst = [
        *common,
        "--name",
        "dst",
        "--trials",
        "3",
        "--workers",
        "1",
        "--warm-start-from",
        "src",
        "--warm-start-top",
        "2",
        "--narrow",
        f"x={best[0]['params']['x'] - 1e-3}:{best[0]['params']['x'] + 1e-3}",
    ]
    proc = cli("start", *dst, cwd=tmp_path, check=True)
    assert "warm start from 'src': its best 2 of 4 complete trials queued to run first" in proc.stdout
    assert "left to the sampler where the spaces differ: x=" in proc.stdout  # the second's x is outside --narrow
    rows = json.loads(warm_cli("trials", "--name", "dst", "--json", cwd=tmp_path, check=True).stdout)
    assert len(rows) == 3 and rows[0]["params"] == best[0]["params"]  # the best first, whole
    assert rows[1]["params"]["lr"] == best[1]["params"]["lr"]  # the second's lr; its x the sampler's, in range
    assert abs(rows[1]["params"]["x"] - best[0]["params"]["x"]) <= 1e-3 != best[1]["params"]["x"]
    again = cli("start", *dst, cwd=tmp_path)  # the study exists now: a warm start is a new study's
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "study 'dst' exists" in again.stderr
    missing = cli("start", *common, "--name", "dst2", "--trials", "2", "--workers", "1", "--warm-start-from", "nope",
                  cwd=tmp_path)  # fmt: skip
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "'nope'" in missing.stderr
    status = warm_cli("status", "--name", "dst2", cwd=tmp_path)
    assert status.returncode == 2 and "'dst2' does not exist" in status.stderr  # nothing half-created
