"""Scaling on one CPU node: W single-threaded workers against one, and against one worker with W threads.

Runs the same study with ``search start`` (embedded stores, pruner ``none`` so every trial trains
every epoch) in three configurations, alternately, ``--repeats`` times each, and prints the
training throughput of each: epochs trained per second between the first trial's start and the
last trial's end, counted from the trials' reported epochs.

  1 x 1 thread   --workers 1, OMP_NUM_THREADS=1
  W x 1 thread   --workers W, OMP_NUM_THREADS=1        (search start's default on CPU)
  1 x W threads  --workers 1, OMP_NUM_THREADS=W        (the default before)

The issue's target: W x 1 at least 0.85 x W times 1 x 1. Medians; the machine is noisy.

    python benchmarks/bench_workers.py
    python benchmarks/bench_workers.py --workers 2 --trials 16 --repeats 5
"""

from __future__ import annotations

import argparse
import os
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
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--study", default="resmlp")
    parser.add_argument("--study-option", action="append", metavar="KEY=VALUE", help="[data=digits, search_epochs=10]")
    return parser.parse_args()


def run_once(args: argparse.Namespace, workers: int, threads: int, seed: int) -> float:
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
        storage = f"sqlite:///{Path(tmp) / 'project' / 'optuna.db'}"
        trials = optuna.load_study(study_name=args.study, storage=storage).get_trials(deepcopy=False)
        epochs = sum(len(t.intermediate_values) for t in trials)
        first = min(t.datetime_start for t in trials if t.datetime_start)
        last = max(t.datetime_complete for t in trials if t.datetime_complete)
        return epochs / (last - first).total_seconds()


def main() -> None:
    args = parse_args()
    args.study_option = args.study_option or ["data=digits", "search_epochs=10"]
    w = args.workers
    configs = {"1 x 1 thread": (1, 1), f"{w} x 1 thread": (w, 1), f"1 x {w} threads": (1, w)}
    rates: dict[str, list[float]] = {name: [] for name in configs}
    started = time.time()
    for repeat in range(args.repeats):  # alternate, so drifts of the machine hit all alike
        for name, (workers, threads) in configs.items():
            rates[name].append(run_once(args, workers, threads, seed=repeat))
            print(f"  {name:>14} #{repeat + 1}: {rates[name][-1]:.2f} epochs/s", flush=True)
    options = ",".join(args.study_option)
    print(f"\n{args.study} ({options}), {args.trials} trials, pruner none, {len(os.sched_getaffinity(0))} usable "
          f"cores; medians of {args.repeats} runs each ({time.time() - started:.0f} s)\n")  # fmt: skip
    single = statistics.median(rates["1 x 1 thread"])
    print(f"{'configuration':<16}{'epochs/s':>10}{'x 1x1':>8}")
    for name in configs:
        rate = statistics.median(rates[name])
        print(f"{name:<16}{rate:>10.2f}{rate / single:>8.2f}")
    print(f"\ntarget: {w} x 1 thread >= {0.85 * w:.2f} x (1 x 1 thread)")


if __name__ == "__main__":
    main()
