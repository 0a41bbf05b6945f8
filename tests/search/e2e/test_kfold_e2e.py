"""`search start` with `--study-option folds=3` and two real workers, on SQLite and PostgreSQL: each
trial fits three folds, its value is their mean, and the champion trains on every fold's rows."""

from __future__ import annotations

import json

import pytest
from search_helpers import mlflow_runs

OPTIONS = ["data=synthetic", "rows=240", "features=6", "classes=3", "folds=3", "search_epochs=2", "full_epochs=2"]
# Small batches: resmlp's space goes up to 1024 rows a step, more than a fold of 240 rows trains on.
CONFIGS = [{"lr": lr, "weight_decay": 1e-4, "width": 64, "depth": 1, "dropout": 0.0, "batch_size": 32,
            "warmup_fraction": 0.0, "grad_accum_steps": 1} for lr in (3e-3, 1e-3, 3e-4)]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_kfold_search_values_trials_by_their_folds_mean(cli, warm_cli, tmp_path, request, backend):
    storage = ["--storage", request.getfixturevalue("pg_url")] if backend == "postgres" else []
    retrain = backend == "sqlite"  # the retrain reads the same trial whatever stores it: once is enough
    (tmp_path / "known.json").write_text(json.dumps(CONFIGS))
    flags = [flag for option in OPTIONS for flag in ("--study-option", option)]
    proc = cli("start", "--study", "resmlp", "--trials", "3", "--workers", "2", "--enqueue", "known.json",
               *flags, *storage, *([] if retrain else ["--no-retrain"]), cwd=tmp_path, check=True)  # fmt: skip
    assert "Wilcoxon signed-rank test of the folds" in proc.stdout  # the default pruner with folds
    assert "folds: 3; a trial fits each in turn (2 epochs each)" in proc.stdout
    assert "with 3 folds it never prunes" in proc.stdout  # p < 0.1 needs four folds worse than the best's
    assert "COMPLETE" in proc.stdout and "(mean of 3 folds) after" in proc.stdout
    if retrain:
        assert "epochs, on all 3 folds' rows, to the folds' mean best epoch (" in proc.stdout
        assert "is the new champion" in proc.stdout
    rows = json.loads(warm_cli("trials", "--study", "resmlp", "--json", *storage, cwd=tmp_path, check=True).stdout)
    assert [r["state"] for r in rows] == ["COMPLETE"] * 3, rows
    assert len({r["worker"] for r in rows}) == 2  # both workers trained
    for row in rows:
        folds = [row["extra"][f"fold_{k}_val_loss"] for k in range(3)]
        assert row["value"] == pytest.approx(sum(folds) / 3) == row["extra"]["val_loss_fold_mean"]
        assert row["epochs"] == sum(row["extra"][f"fold_{k}_epochs"] for k in range(3)) >= 3
    best = json.loads(warm_cli("best", "--study", "resmlp", "--json", *storage, cwd=tmp_path, check=True).stdout)
    assert best["value"] == min(r["value"] for r in rows)
    assert best["folds"] == [rows[best["trial"]]["extra"][f"fold_{k}_val_loss"] for k in range(3)]
    assert (best["champion"] is not None) == retrain
    runs = {r.data.tags.get("hpsearch.trial"): r for r in mlflow_runs(tmp_path / ".search").values()}
    for row in rows:
        metrics = runs[str(row["number"])].data.metrics
        assert {f"fold_{k}_val_loss" for k in range(3)} <= set(metrics) and "val_loss_fold_std" in metrics
