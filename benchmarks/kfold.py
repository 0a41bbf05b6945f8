"""K-fold against one validation split at an equal epoch budget, read on the champion's TEST split.

Issue 49's question: on small data, does choosing hyperparameters by the mean over K folds (the
``folds`` study option) give a better final model than choosing them on one 15% validation split,
when both searches train the same number of epochs? For each seed, both modes run the real
``search start`` (one local worker, ``--pruner none --patience off`` so that every trial trains its
epochs and the budgets are exactly equal) on the same data and the same test rows (``seed`` fixes
the split; the folds deal the other 85%):

* ``one-split``: ``K x --trials`` trials, each ``--epochs`` epochs on the 70% training split;
* ``kfold``: ``--trials`` trials, each K folds of ``--epochs`` epochs.

Each then retrains its champion as ``search start`` does (``--full-epochs``: one split on its
training rows, keeping the best validation epoch; k-fold on all 85%, keeping the last epoch) and
tests it on the held-out test split. Printed: each seed's test loss and accuracy side by side, the
paired wins and losses of k-fold (lower test loss, higher accuracy; ties apart), the two-sided sign
test and the medians.

  python benchmarks/bench_search.py kfold --problem synthetic --rows 400 --folds 3 --trials 6 --seeds 5

``--problem digits`` takes ``--rows`` rows of scikit-learn's digits (a stratified random subset,
from the seed, written to a CSV file the study reads as ``data=file``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODES = ("one-split", "kfold")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--problem", choices=("synthetic", "digits"), default="synthetic")
    parser.add_argument("--rows", type=int, default=400, help="rows of data (test split: 15%% of them) [400]")
    parser.add_argument("--features", type=int, default=10, help="synthetic: features [10]")
    parser.add_argument("--classes", type=int, default=4, help="synthetic: classes [4]")
    parser.add_argument("--folds", type=int, default=3, help="K [3]")
    parser.add_argument("--trials", type=int, default=6, help="k-fold trials; one split gets K times as many [6]")
    parser.add_argument("--epochs", type=int, default=10, help="epochs a fit trains in the search [10]")
    parser.add_argument("--full-epochs", type=int, default=20, help="epochs of the champion's retrain [20]")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="folder for table.txt and runs.json")


def _digits_csv(rows: int, seed: int, path: Path) -> None:
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from studies._tabular import digits_table

    table = digits_table()
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.permutation(len(table.y))[:rows])
    header = ",".join([*(f"p{i}" for i in range(table.x.shape[1])), "label"])
    lines = [",".join([*(f"{v:g}" for v in table.x[i]), str(int(table.y[i]))]) for i in keep]
    path.write_text(header + "\n" + "\n".join(lines) + "\n")


def _options(args: argparse.Namespace, seed: int, tmp: Path) -> dict[str, Any]:
    if args.problem == "synthetic":
        data: dict[str, Any] = {"data": "synthetic", "rows": args.rows, "features": args.features,
                                "classes": args.classes}  # fmt: skip
    else:
        _digits_csv(args.rows, seed, tmp / "digits.csv")
        data = {"data": "file", "path": str(tmp / "digits.csv"), "target": "label"}
    return {**data, "seed": seed, "search_epochs": args.epochs, "full_epochs": args.full_epochs}


def _cli(*argv: str, env: dict[str, str], cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "search", *argv], env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"search {argv[0]} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def run_one(args: argparse.Namespace, mode: str, seed: int) -> dict[str, Any]:
    """One search and its champion's retrain: the champion's test metrics, epochs and trials spent."""
    with tempfile.TemporaryDirectory(prefix="bench-kfold-") as name:
        tmp = Path(name)
        options = _options(args, seed, tmp)
        trials = args.trials * (args.folds if mode == "one-split" else 1)
        if mode == "kfold":
            options["folds"] = args.folds
        env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_") and k != "MLFLOW_TRACKING_URI"}
        env |= {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        started = time.time()
        _cli("start", "--study", "resmlp", "--name", "bench", "--trials", str(trials), "--workers", "1",
             "--seed", str(seed), "--pruner", "none", "--patience", "off", "--quiet",
             *(a for k, v in options.items() for a in ("--study-option", f"{k}={v}")), env=env, cwd=tmp)  # fmt: skip
        seconds = time.time() - started
        rows = json.loads(_cli("trials", "--name", "bench", "--json", env=env, cwd=tmp))
        best = json.loads(_cli("best", "--name", "bench", "--json", env=env, cwd=tmp))
    champion = best["champion"] or {}
    return {"mode": mode, "seed": seed, "trials": len(rows), "epochs": sum(r["epochs"] for r in rows),
            "best_value": best["value"], "best_trial": best["trial"], "seconds": round(seconds, 1),
            "test": champion.get("test_metrics", {})}  # fmt: skip


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test (ties left out)."""
    n = wins + losses
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n)


def table(runs: list[dict[str, Any]]) -> str:
    """Per seed, both modes' champion test loss and accuracy; then k-fold's paired record and the medians."""
    by = {(r["mode"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs if all((m, r["seed"]) in by for m in MODES)})
    lines = ["seed  epochs one/kfold  test_loss one  test_loss kfold  test_acc one  test_acc kfold  "
             "search s one/kfold"]  # fmt: skip
    for s in seeds:
        one, kf = by[("one-split", s)], by[("kfold", s)]
        lines.append(f"{s:<4}  {one['epochs']:>5}/{kf['epochs']:<5}      {one['test']['test_loss']:<13.4f}  "
                     f"{kf['test']['test_loss']:<15.4f}  {one['test']['test_accuracy']:<12.4f}  "
                     f"{kf['test']['test_accuracy']:<14.4f}  {one['seconds']:.0f}/{kf['seconds']:.0f}")  # fmt: skip
    for metric, lower in (("test_loss", True), ("test_accuracy", False)):
        pairs = [(by[("one-split", s)]["test"][metric], by[("kfold", s)]["test"][metric]) for s in seeds]
        wins = sum(1 for one, kf in pairs if (kf < one if lower else kf > one))
        losses = sum(1 for one, kf in pairs if (kf > one if lower else kf < one))
        diffs = [kf - one for one, kf in pairs]
        one_median, kfold_median = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        lines.append(
            f"{metric}: k-fold wins {wins}, loses {losses}, ties {len(pairs) - wins - losses} "
            f"(sign test p = {sign_test(wins, losses):.3g}); median one split {one_median:.4f}, "
            f"k-fold {kfold_median:.4f}, median paired difference (k-fold - one) {statistics.median(diffs):+.4f}"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    if args.folds < 2 or args.trials < 1 or args.seeds < 1 or args.rows < 10:
        raise SystemExit("--folds must be at least 2, --trials and --seeds at least 1, --rows at least 10")
    runs = []
    for seed in range(args.seeds):
        for mode in MODES:
            run = run_one(args, mode, seed)
            runs.append(run)
            print(f"  {mode} seed {seed}: {run['trials']} trials, {run['epochs']} epochs, best "
                  f"{run['best_value']:.4g}, test {run['test']} in {run['seconds']:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    text = table(runs)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.txt").write_text(text + "\n")
        (args.out / "runs.json").write_text(json.dumps(runs, indent=1))
        print(f"\nwrote {args.out}/table.txt, runs.json")
