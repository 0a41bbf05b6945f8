"""Known configurations (`--enqueue`), a warm start (`--warm-start-from`) and `--stop-at` in one
`search start` with two workers, one SIGKILLed mid-trial, on SQLite and PostgreSQL: the queued
configurations run first, the dead trial is retried once, the search ends early with an exact
budget, and `status`, `trials`, `best`, the report and MLflow show it.

The training-free sleep study (``benchmarks/studies/sleep_study.py``): its loss is the squared
distance of a weight from 0.3, starting at ``x``; at ``lr=0.001`` it barely moves.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from search_helpers import (
    FAST,
    SLEEP_STUDY,
    assert_exact_budget,
    logical,
    parent_summary,
    sleep_study_coordinator,
    start_losing_a_worker,
)

KNOWN = {"x": 1.9, "lr": 0.001}  # val_loss about 2.56: far from --stop-at
WARM = {"x": 0.5, "lr": 0.001}  # about 0.04: reaches --stop-at 0.1
SOURCE = [(WARM, 0.04), ({"x": -1.0, "lr": 0.01}, 1.69)]  # the earlier study's two complete trials


def _earlier_study(url: str) -> None:
    """``src``: an earlier sleep study in the same storage, its trials written straight in."""
    import optuna
    from optuna.distributions import FloatDistribution

    _, study = sleep_study_coordinator(url, "src", len(SOURCE))
    space = {"x": FloatDistribution(-2.0, 2.0), "lr": FloatDistribution(1e-3, 0.5, log=True)}
    for params, value in SOURCE:
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=value,
                                                  params=params, distributions=space))  # fmt: skip


def _json(warm_cli: Any, *args: str, cwd: Path) -> Any:
    return json.loads(warm_cli(*args, "--json", cwd=cwd, check=True).stdout)


@pytest.mark.slow
def test_known_and_warm_started_trials_and_stop_at_survive_a_killed_worker(study_url, warm_cli, tmp_path):
    _earlier_study(study_url)
    (tmp_path / "known.json").write_text(json.dumps([KNOWN]))
    running, watch = start_losing_a_worker(
        ["--study", str(SLEEP_STUDY), "--trials", "8", "--workers", "2", *FAST, "--enqueue", "known.json",
         "--warm-start-from", "src", "--warm-start-top", "1", "--stop-at", "0.1",
         "--study-option", "epochs=4", "--study-option", "epoch_seconds=0.5"], study_url, "dst", tmp_path,
    )  # fmt: skip
    log = (tmp_path / "start.log").read_text()
    assert "  queued 1 known configuration to run first (--enqueue)\n  warm start from 'src': its best 1 of 2 " in log
    assert "the search ended early: --stop-at 0.1 reached (best " in log

    trials = watch.trials()
    [retry] = [t for t in trials if t.system_attrs.get("failed_trial") == running.number]
    assert watch.trial(running.number).state.name == "FAIL" and retry.state.name == "COMPLETE"
    assert retry.params == running.params
    firsts = {logical(t): t.params for t in trials}
    assert (firsts[0], firsts[1]) == (KNOWN, WARM)  # the known configuration, then the warm start's

    where = ["--name", "dst", "--storage", study_url]
    status = _json(warm_cli, "status", *where, cwd=tmp_path)
    assert status["done"] and status["running"] == status["waiting"] == 0
    assert status["finished"] == status["budget"] <= 8 and status["best_value"] <= 0.1
    assert status["ended_early"]["reason"].startswith("--stop-at 0.1 reached (best ")
    said = warm_cli("status", *where, cwd=tmp_path, check=True).stdout
    ended = status["ended_early"]
    assert f"\n  ended early: {ended['reason']}; no new trial after {ended['claimed']} of the 8 asked\n" in said
    assert_exact_budget(trials, status["budget"])  # none left RUNNING, none finished twice
    rows = _json(warm_cli, "trials", *where, cwd=tmp_path)
    assert [r["params"] for r in rows[:2]] == [KNOWN, WARM]
    best = _json(warm_cli, "best", *where, cwd=tmp_path)
    assert best["value"] == status["best_value"] <= 0.1

    out = tmp_path / "report.html"
    warm_cli("report", *where, "-o", str(out), cwd=tmp_path, check=True)
    page = out.read_text()
    assert re.search(rf"best</th><td>{best['value']:.6g} \(trial {best['trial']}\)", page)
    assert "<th>ended early</th><td>--stop-at 0.1 reached (best " in page

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / '.search' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("dst").experiment_id
    runs = {r.info.run_id: r for r in client.search_runs([experiment], max_results=100)}
    dead_run = watch.trial(running.number).user_attrs.get("mlflow_run_id")  # none if killed before it noted it
    assert not dead_run or runs[dead_run].info.status == "KILLED"
    assert runs[retry.user_attrs["mlflow_run_id"]].info.status == "FINISHED"
    [parent] = [r for r in runs.values() if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs.values() if r is not parent]
    assert parent.info.status == "FINISHED" and "RUNNING" not in {r.info.status for r in children}
    assert sum(r.info.status == "FINISHED" for r in children) == status["complete"]
    summary = parent_summary(tmp_path / ".search", "dst")
    assert summary["ended_early"]["reason"].startswith("--stop-at 0.1 reached")
    assert summary["best_trial"] == best["trial"] and summary["finished"] == status["finished"]
