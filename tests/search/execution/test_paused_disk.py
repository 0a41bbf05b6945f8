"""Freeze-thaw with the paused trials' disk bounded (``asha:disk``), two real workers on PostgreSQL:
checkpoints are evicted, the evicted trials end pruned and are never resumed, and no live trial's
checkpoint goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from search_helpers import (
    GRACE_S,
    StudyWatch,
    assert_exact_logical_budget,
    continued_attempts,
    logical,
    mlflow_runs,
    spawn,
    stop,
    wait_for,
)

RANKED_STUDY = Path(__file__).resolve().parents[1] / "data" / "ranked_study.py"
pytestmark = [pytest.mark.slow, pytest.mark.postgres]
BOUND = "40KB"  # a paused trial keeps two checkpoints of about 18 kB: room for one, so some are evicted


def _live_missing(watch: StudyWatch, root: Path) -> list[int]:
    """Running attempts that have saved a checkpoint (one every epoch) but whose folder is gone, and
    still run after the look (a trial that ended meanwhile may have been paused and evicted)."""
    before = {t.number: t for t in watch.trials() if t.state.name == "RUNNING" and t.intermediate_values}
    gone = {n for n, t in before.items() if not (root / f"trial-{logical(t)}").is_dir()}
    return [t.number for t in watch.trials() if t.number in gone and t.state.name == "RUNNING"]


def test_evicted_paused_trials_end_pruned_and_live_checkpoints_stay(warm_cli, tmp_path, pg_url):
    root = tmp_path / ".search" / "checkpoints" / "ft-disk"
    args = ["start", "--study", str(RANKED_STUDY), "--name", "ft-disk", "--trials", "8", "--workers", "2",
            "--heartbeat-interval", "1", "--grace-period", str(GRACE_S), "--pruner",
            f"asha:min=1,factor=2,disk={BOUND}", "--no-retrain", "--checkpoint-every", "0", "--patience", "off",
            "--storage", pg_url, "--study-option", "epochs=4", "--study-option", "sleep=0.2"]  # fmt: skip
    start = spawn(args, tmp_path, tmp_path / "start.log")
    missing: list[int] = []
    try:
        watch = StudyWatch(pg_url, "ft-disk", timeout=120)

        def over() -> bool:
            missing.extend(_live_missing(watch, root))
            return start.poll() is not None

        wait_for(over, 240, "the study to finish")
    finally:
        stop(start)
    log = (tmp_path / "start.log").read_text()
    assert start.returncode == 0, log[-4000:]
    assert not missing, f"checkpoints of running trials {sorted(set(missing))} were removed"
    trials: list[Any] = watch.trials()
    assert_exact_logical_budget(trials, 8)
    evicted = [t for t in trials if "paused_evicted" in t.user_attrs]
    assert evicted, "no paused trial's checkpoint was evicted"
    assert all(t.state.name == "PRUNED" and "paused_at" not in t.user_attrs for t in evicted)
    assert not {t.number for t in evicted} & continued_attempts(trials), "an evicted trial was resumed"
    by_number = {t.number: t for t in trials}
    resumptions = [t for t in trials if "resumed_from" in t.user_attrs]
    for t in resumptions:  # each went on from the checkpoint kept at its pause: none was evicted from under it
        assert t.user_attrs["resumed_from_epoch"] == by_number[t.user_attrs["resumed_from"]].user_attrs["paused_at"]
    assert f"{len(evicted)} paused whose checkpoints were evicted (asha:disk)" in log
    assert "checkpoint evicted (disk bound)" in warm_cli("trials", "--name", "ft-disk", "--storage", pg_url,
                                                         cwd=tmp_path, check=True).stdout  # fmt: skip
    run = mlflow_runs(tmp_path / ".search")[evicted[0].user_attrs["mlflow_run_id"]]
    assert run.data.tags["hpsearch.state"] == "PRUNED" and run.data.tags["hpsearch.paused_evicted"]
    assert not list(root.glob("trial-*")), "checkpoints were left behind"
