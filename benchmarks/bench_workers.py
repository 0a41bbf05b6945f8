"""Scaling on one CPU node: W single-threaded workers against one, and against one worker with W threads.

Runs the same study with ``search start`` (embedded stores, pruner ``none`` so every trial trains
every epoch) in three configurations, alternately, ``--repeats`` times each, and prints two
training throughputs of each, in epochs per second:

  steady   while every worker trains: epochs ending (their MLflow timestamps) between the last
           worker's first trial start and the first worker's last trial end, over that window.
           The issue's measure: W workers on W cores against one.
  overall  between the first trial's start and the last trial's end, every epoch: includes the
           later workers' start-up (3 processes importing torch on W cores) and the last trials'
           tail, when fewer than W workers train.

  1 x 1 thread   --workers 1, OMP_NUM_THREADS=1
  W x 1 thread   --workers W, OMP_NUM_THREADS=1        (search start's default on CPU)
  1 x W threads  --workers 1, OMP_NUM_THREADS=W        (the default before)

The default study, ``benchmarks/studies/fixed_cost_study.py`` (resmlp on digits, width 128, depth
2, batch 64: only the learning rate, weight decay, dropout and warm-up are searched), makes every
epoch the same work: in resmlp's own space an epoch's cost depends on the width, depth and batch
the sampler picked, and it picks differently beside running trials, so its epochs per second
compare the trials picked more than the configurations (``--study resmlp`` to see it).

The issue's target: W x 1 at least 0.85 x W times 1 x 1. Medians; the machine is noisy.

    python benchmarks/bench_workers.py
    python benchmarks/bench_workers.py --workers 2 --trials 24 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="W [usable cores]")
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--study", default=str(ROOT / "benchmarks" / "studies" / "fixed_cost_study.py"))
    parser.add_argument("--study-option", action="append", metavar="KEY=VALUE", help="[data=digits, search_epochs=10]")
    return parser.parse_args()


def run_once(args: argparse.Namespace, workers: int, threads: int, seed: int) -> tuple[float, float]:
    """(steady, overall) epochs per second of one ``search start``."""
    import optuna

    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SEARCH_", "MLFLOW_"))}
        env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(threads))
        options = [x for option in args.study_option for x in ("--study-option", option)]
        command = [sys.executable, "-m", "search", "start", "--study", args.study, "--trials", str(args.trials),
                   "--workers", str(workers), "--no-retrain", "--seed", str(seed), "--pruner", "none", *options,
                   "--project-dir", str(Path(tmp) / "project"), "--quiet"]  # fmt: skip
        done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise SystemExit(f"search start failed:\n{done.stdout}\n{done.stderr}")
        project = Path(tmp) / "project"
        [name] = optuna.get_all_study_names(f"sqlite:///{project / 'optuna.db'}")
        trials = optuna.load_study(study_name=name, storage=f"sqlite:///{project / 'optuna.db'}").trials
        spans: dict[str, list[float]] = {}  # worker -> [first start, last end], epoch seconds
        for t in trials:
            assert t.datetime_start and t.datetime_complete, "every trial ends in a finished study"
            start, end = t.datetime_start.timestamp(), t.datetime_complete.timestamp()  # naive local times
            span = spans.setdefault(t.user_attrs["worker"], [start, end])
            span[:] = [min(span[0], start), max(span[1], end)]
        with sqlite3.connect(project / "mlflow.db") as db:
            ends = [ms / 1000 for (ms,) in db.execute("SELECT timestamp FROM metrics WHERE key = 'epoch_seconds'")]
        first, last = min(s for s, _ in spans.values()), max(e for _, e in spans.values())
        low, high = max(s for s, _ in spans.values()), min(e for _, e in spans.values())
        steady = sum(low <= end <= high for end in ends) / (high - low) if high > low else float("nan")
        return steady, sum(len(t.intermediate_values) for t in trials) / (last - first)


def main() -> None:
    args = parse_args()
    args.study_option = args.study_option or ["data=digits", "search_epochs=10"]
    w = args.workers
    configs = {"1 x 1 thread": (1, 1), f"{w} x 1 thread": (w, 1), f"1 x {w} threads": (1, w)}
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    started = time.time()
    for repeat in range(args.repeats):  # alternate, so drifts of the machine hit all alike
        for name, (workers, threads) in configs.items():
            rates[name].append(run_once(args, workers, threads, seed=repeat))
            steady, overall = rates[name][-1]
            print(f"  {name:>14} #{repeat + 1}: steady {steady:.2f}, overall {overall:.2f} epochs/s", flush=True)
    options = ",".join(args.study_option)
    print(f"\n{Path(args.study).stem} ({options}), {args.trials} trials, pruner none, "
          f"{len(os.sched_getaffinity(0))} usable cores; medians of {args.repeats} runs each "
          f"({time.time() - started:.0f} s)\n")  # fmt: skip
    medians = {name: [statistics.median(r[i] for r in rates[name]) for i in (0, 1)] for name in configs}
    single = medians["1 x 1 thread"]
    print(f"{'configuration':<16}{'steady':>9}{'x 1x1':>8}{'overall':>10}{'x 1x1':>8}   epochs/s")
    for name, (steady, overall) in medians.items():
        print(f"{name:<16}{steady:>9.2f}{steady / single[0]:>8.2f}{overall:>10.2f}{overall / single[1]:>8.2f}")
    print(f"\ntarget: {w} x 1 thread >= {0.85 * w:.2f} x (1 x 1 thread), steady")


if __name__ == "__main__":
    main()
