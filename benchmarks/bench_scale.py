"""Scale benchmark: W workers on PostgreSQL over a training-free study whose trials sleep a fixed time.

For each worker count W it creates a fresh study (and fresh Optuna and MLflow databases), starts
`search start --workers 0` to follow it and W `search worker` processes, as W nodes would, and
prints, side by side with the ideal (W trials every `trial_seconds`):

  trials/s achieved vs ideal, and per-trial orchestration time (worker time outside trainer.fit:
  claim, suggest, MLflow run, tell), p50 and p95.

Usage: python benchmarks/bench_scale.py [--workers 1,4,16,32] [--trial-seconds 1] [--trials-per-worker 4]
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


def run_once(admin_url: str, workers: int, trial_seconds: float, trials: int) -> dict[str, float]:
    import optuna

    admin = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    (db1, storage), (db2, tracking) = create_db(admin, admin_url), create_db(admin, admin_url)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "SEARCH_STORAGE": storage, "SEARCH_TRACKING_URI": tracking,
                   "SEARCH_PROJECT_DIR": tmp, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}  # fmt: skip
            log = open(Path(tmp) / "bench.log", "ab")  # noqa: SIM115
            search = [sys.executable, "-m", "search"]
            start = subprocess.Popen(
                [*search, "start", "--study", str(SLEEP_STUDY), "--trials", str(trials), "--workers", "0",
                 "--no-retrain", "--pruner", "none", "--study-option", f"epoch_seconds={trial_seconds}",
                 "--study-option", "epochs=1"], env=env, stdout=subprocess.PIPE, stderr=log, text=True,
            )  # fmt: skip
            assert start.stdout is not None
            for line in start.stdout:  # wait until the study exists
                if "created; budget" in line:
                    break
            procs = [subprocess.Popen([*search, "worker", "--name", "sleep"], env=env, stdout=log, stderr=log)
                     for _ in range(workers)]  # fmt: skip
            for proc in [*procs, start]:
                proc.wait()
            study = optuna.load_study(
                study_name="sleep", storage=storage.replace("postgresql:", "postgresql+psycopg2:")
            )
            done = [t for t in study.get_trials(deepcopy=False) if t.datetime_complete]
    finally:
        drop_db(admin, db1)
        drop_db(admin, db2)
        admin.dispose()
    span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
    orchestration = sorted(t.user_attrs["overhead_seconds"] for t in done)
    ideal = workers / trial_seconds
    return {
        "trials": len(done),
        "throughput": len(done) / span,
        "ideal": ideal,
        "p50_ms": 1000 * statistics.median(orchestration),
        "p95_ms": 1000 * orchestration[int(0.95 * (len(orchestration) - 1))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin-url", default="postgresql+psycopg2://root@127.0.0.1:5432/postgres")
    parser.add_argument("--workers", default="1,4,16,32")
    parser.add_argument("--trial-seconds", type=float, default=1.0)
    parser.add_argument("--trials-per-worker", type=int, default=4)
    args = parser.parse_args()
    print(f"{'workers':>7} {'trials':>6} {'trials/s':>9} {'ideal':>7} {'% ideal':>8} {'orch p50':>9} {'orch p95':>9}")
    for workers in [int(w) for w in args.workers.split(",")]:
        started = time.monotonic()
        r = run_once(args.admin_url, workers, args.trial_seconds, workers * args.trials_per_worker)
        print(
            f"{workers:>7} {r['trials']:>6} {r['throughput']:>9.2f} {r['ideal']:>7.2f} "
            f"{100 * r['throughput'] / r['ideal']:>7.1f}% {r['p50_ms']:>7.0f}ms {r['p95_ms']:>7.0f}ms"
            f"   ({time.monotonic() - started:.0f}s wall)",
            flush=True,
        )


if __name__ == "__main__":
    main()
