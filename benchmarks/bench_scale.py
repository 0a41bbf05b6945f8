"""Scale benchmark: W workers on PostgreSQL over a training-free study whose trials sleep a fixed time.

For each worker count W it creates a fresh study (and fresh Optuna and MLflow databases), starts
`search start --workers 0` to follow it and W `search worker` processes, as W nodes would, and
prints, side by side with the ideal (W trials every `trial_seconds`):

  trials/s achieved vs ideal, and per-trial orchestration time (worker time not spent training:
  claim, suggest, MLflow run, the per-epoch pruner reports and MLflow batches), p50 and p95.

Each trial has 4 epochs of trial_seconds/4, each reported to the pruner and logged to MLflow.
Throughput is taken per worker over its own active span (first trial start to last trial end),
then summed: process start-up (importing torch and mlflow, seconds each, much longer with 32 on
a small machine) is a one-time cost per worker, not orchestration. The end-to-end rate, start-up
included, is printed too. A worker's first trial still pays one-time costs of its own (MLflow's
import, seconds of CPU, comes on the writer thread while that trial trains), so the warm rate
counts only the trials that end while every worker is past its first (window from the last first
trial's end to the first last trial's end), with their CPU per trial: the rate of a long study.

Usage: python benchmarks/bench_scale.py [--workers 1,4,16,32] [--trial-seconds 1] [--trials-per-worker 4]
CPU is accounted for too (the machine's busy time from /proc/stat, the workers' from their trials'
``cpu_seconds``): per trial inside the workers, per trial elsewhere (outside the workers and the
follower: PostgreSQL's backends and the rest of the machine), and per process outside its trials
(start-up and exit; the follower counted as one of the processes), which says what bounds the rate
when the machine's cores, not the trials, are the limit.

With ``--profile DIR`` every worker runs under ``benchmarks/cpu_profile.py`` (cProfile on every
thread, timed by the thread's CPU clock) and the table is followed by where the trials' CPU went,
per trial, step by step, and the functions with the most CPU of their own. Profiling slows Python
code down, so read those figures as shares, and the throughput of such a run as no figure at all.

Targets (issue 4): >= 90% of ideal throughput with 32 workers and 1 s trials; p50 orchestration < 100 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy

ROOT = Path(__file__).resolve().parents[1]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"
EPOCHS = 4


def create_db(admin: sqlalchemy.Engine, base: str) -> tuple[str, str]:
    name = f"hpsearch_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    return name, base.rsplit("/", 1)[0] + f"/{name}"


def drop_db(admin: sqlalchemy.Engine, name: str) -> None:
    with admin.connect() as conn:
        conn.execute(
            sqlalchemy.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname=:n"), {"n": name}
        )
        conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}"'))


def run_once(admin_url: str, workers: int, trial_seconds: float, trials: int,
             profile: Path | None = None) -> dict[str, float]:  # fmt: skip
    import optuna

    admin = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    (db1, storage), (db2, tracking) = create_db(admin, admin_url), create_db(admin, admin_url)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "SEARCH_STORAGE": storage, "SEARCH_TRACKING_URI": tracking,
                   "SEARCH_PROJECT_DIR": tmp, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}  # fmt: skip
            log = open(Path(tmp) / "bench.log", "ab")  # noqa: SIM115
            search = [sys.executable, "-m", "search"]
            busy0, children0 = machine_busy_seconds(), children_cpu_seconds()
            start = subprocess.Popen(
                [*search, "start", "--study", str(SLEEP_STUDY), "--trials", str(trials), "--workers", "0",
                 "--no-retrain", "--pruner", "none", "--study-option", f"epoch_seconds={trial_seconds / EPOCHS}",
                 "--study-option", f"epochs={EPOCHS}"], env=env, stdout=subprocess.PIPE, stderr=log, text=True,
            )  # fmt: skip
            assert start.stdout is not None
            for line in start.stdout:  # wait until the study exists
                if "created; budget" in line:
                    break

            def worker(i: int) -> list[str]:
                if profile is None:
                    return [*search, "worker", "--name", "sleep"]
                out = profile / f"w{workers}-{i}.prof"
                return [sys.executable, str(ROOT / "benchmarks" / "cpu_profile.py"), str(out), *search[1:], "worker",
                        "--name", "sleep"]  # fmt: skip

            procs = [subprocess.Popen(worker(i), env=env, stdout=log, stderr=log) for i in range(workers)]
            for proc in procs:
                proc.wait()
            if all(proc.returncode for proc in procs):  # the follower would wait for a worker forever
                start.terminate()
                start.wait()
                sys.exit(f"every worker failed; see the end of {Path(tmp) / 'bench.log'}:\n"
                         + (Path(tmp) / "bench.log").read_text()[-3000:])  # fmt: skip
            start.wait()
            busy, children = machine_busy_seconds() - busy0, children_cpu_seconds() - children0
            study = optuna.load_study(
                study_name="sleep", storage=storage.replace("postgresql:", "postgresql+psycopg2:")
            )
            done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    finally:
        drop_db(admin, db1)
        drop_db(admin, db2)
        admin.dispose()
    span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
    orchestration = sorted(t.user_attrs["overhead_seconds"] for t in done)
    ideal = workers / trial_seconds
    in_trials = sum(t.user_attrs["cpu_seconds"] for t in done)
    return {
        "trials": len(done),
        "throughput": steady_throughput(done),
        "warm": (warmed := warm(done))[0],
        "cpu_warm_ms": warmed[1],
        "end_to_end": len(done) / span,
        "ideal": ideal,
        "p50_ms": 1000 * statistics.median(orchestration),
        "p95_ms": 1000 * orchestration[int(0.95 * (len(orchestration) - 1))],
        # CPU, whole machine: the workers' own in their trials (cpu_seconds: claim to tell, every
        # thread), the rest of their processes' lives (imports, connecting, exit) per process, and what
        # the machine spent beside these processes (PostgreSQL's backends and the rest) per trial.
        "cpu_trial_ms": 1000 * in_trials / len(done),
        "cpu_outside_s": (children - in_trials) / (workers + 1),
        "cpu_other_ms": 1000 * max(0.0, busy - children) / len(done),
    }


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all but idle and iowait), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds of this process's waited-for children (the workers and the follower)."""
    t = os.times()
    return t.children_user + t.children_system


def by_worker(trials: list) -> dict[str, list]:
    """Each worker's trials, in the order they started."""
    out: dict[str, list] = {}
    for trial in sorted(trials, key=lambda t: t.datetime_start):
        out.setdefault(trial.user_attrs["worker"], []).append(trial)
    return out


def steady_throughput(trials: list) -> float:
    """Sum over workers of (its trials / its active span): the rate with every worker up."""
    rate = 0.0
    for runs in by_worker(trials).values():
        span = (max(t.datetime_complete for t in runs) - min(t.datetime_start for t in runs)).total_seconds()
        rate += len(runs) / span
    return rate


def warm(trials: list) -> tuple[float, float]:
    """(trials/s, CPU ms per trial in the workers) while every worker is past its first trial.

    A worker's first trial also pays its one-time costs: MLflow's import (seconds of CPU, on the
    writer thread while the trial trains), the first connections, Accelerate's state. The window
    runs from the last worker's first trial's end to the first worker's last trial's end; the
    trials that end in it count, and the CPU of those trials. NaN when the window is empty (too few
    trials per worker for the workers' start-ups, which take turns at the cores).
    """
    workers = by_worker(trials).values()
    low = max(runs[0].datetime_complete for runs in workers)
    high = min(runs[-1].datetime_complete for runs in workers)
    inside = [t for runs in workers for t in runs[1:] if low < t.datetime_complete <= high]
    if not inside:
        return float("nan"), float("nan")
    seconds = (high - low).total_seconds()
    return len(inside) / seconds, 1000 * sum(t.user_attrs["cpu_seconds"] for t in inside) / len(inside)


CONNECTIONS_PER_PROCESS = 5  # Optuna 3 and MLflow 2, see storage/_engine.py


def check_capacity(admin_url: str, workers: int) -> None:
    """W workers and the follower need about 5 connections each: say so before the server refuses them."""
    admin = sqlalchemy.create_engine(admin_url)
    with admin.connect() as conn:
        limit = int(conn.execute(sqlalchemy.text("SHOW max_connections")).scalar_one())
        reserved = int(conn.execute(sqlalchemy.text("SHOW superuser_reserved_connections")).scalar_one())
    admin.dispose()
    needed = CONNECTIONS_PER_PROCESS * (workers + 1) + 4
    if needed > limit - reserved:
        sys.exit(
            f"{workers} workers need about {needed} connections; this server allows {limit - reserved}. "
            f"Raise it (ALTER SYSTEM SET max_connections = {needed + 50}; then restart) or use fewer workers."
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin-url", default="postgresql+psycopg2://root@127.0.0.1:5432/test")
    parser.add_argument("--workers", default="1,4,16,32")
    parser.add_argument("--trial-seconds", type=float, default=1.0)
    parser.add_argument("--trials-per-worker", type=int, default=4)
    parser.add_argument("--profile", type=Path, help="profile the workers' CPU into this folder (see above)")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    check_capacity(args.admin_url, max(counts))
    print(f"{'workers':>7} {'trials':>6} {'trials/s':>9} {'ideal':>7} {'% ideal':>8} {'orch p50':>9} {'orch p95':>9}"
          f" {'end-to-end':>11} {'CPU/trial in worker':>19} {'elsewhere':>9}"
          f" {'CPU/process outside trials':>26}"
          f" {'warm trials/s':>13} {'% ideal':>8} {'CPU/warm trial':>14}")  # fmt: skip
    for workers in counts:
        started = time.monotonic()
        r = run_once(args.admin_url, workers, args.trial_seconds, workers * args.trials_per_worker, args.profile)
        print(
            f"{workers:>7} {r['trials']:>6} {r['throughput']:>9.2f} {r['ideal']:>7.2f} "
            f"{100 * r['throughput'] / r['ideal']:>7.1f}% {r['p50_ms']:>7.0f}ms {r['p95_ms']:>7.0f}ms"
            f" {r['end_to_end']:>9.2f}/s {r['cpu_trial_ms']:>17.0f}ms {r['cpu_other_ms']:>7.0f}ms"
            f" {r['cpu_outside_s']:>25.2f}s {r['warm']:>13.2f} {100 * r['warm'] / r['ideal']:>7.1f}%"
            f" {r['cpu_warm_ms']:>12.0f}ms   ({time.monotonic() - started:.0f}s wall)",
            flush=True,
        )
    if args.profile:
        print_profiles(args.profile, counts, args.trials_per_worker)


def print_profiles(folder: Path, counts: list[int], trials_per_worker: int) -> None:
    """Per worker count: the trials' CPU step by step (ms per trial, under the profiler), then the
    functions with the most CPU of their own."""
    import cpu_profile

    for workers in counts:
        stats = cpu_profile.merged(sorted(folder.glob(f"w{workers}-*.prof")))  # read once, for both
        print(f"\n{workers} workers, CPU per trial under the profiler (every thread, ms):")
        for label, ms in cpu_profile.phases(stats, workers * trials_per_worker, callees=4):
            print(f"  {label:<72} {ms:>8.1f}")
        cpu_profile.top(stats, 30)


if __name__ == "__main__":
    main()
