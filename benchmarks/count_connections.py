"""Count the PostgreSQL connections each process of a real ``search start`` holds.

Creates two fresh databases on the server (Optuna's and, with ``--mlflow-db``, MLflow's tracking
store), runs ``python -m search start --workers W`` on the sleep study against them, and samples
``pg_stat_activity`` every ``--every`` seconds: each backend's client port is matched to the local
process that owns that socket, so the counts are per process (the follower, each worker). Prints the
most backends each process held at once, by database, and the most for all of them together.

    PYTHONPATH=. python benchmarks/count_connections.py --workers 2 --trials 8 [--mlflow-db]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import psutil
import sqlalchemy

ROOT = Path(__file__).resolve().parents[1]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"
ADMIN_URL = os.environ.get("HPSEARCH_PG_ADMIN_URL", "postgresql+psycopg2://root@127.0.0.1:5432/postgres")
_ACTIVITY = sqlalchemy.text(
    "SELECT client_port, datname FROM pg_stat_activity WHERE datname = ANY(:names) AND client_port IS NOT NULL"
)


class Sampler:
    """Most backends each local process holds at once, per database, from ``pg_stat_activity``."""

    def __init__(self, admin_url: str, databases: list[str], every: float = 0.2) -> None:
        self.engine = sqlalchemy.create_engine(admin_url, poolclass=sqlalchemy.NullPool)
        self.databases, self.every = databases, every
        self.most: dict[tuple[int, str], int] = defaultdict(int)  # (pid, database) -> most at once
        self.most_per_pid: dict[int, int] = defaultdict(int)  # all databases together
        self.most_total = 0
        self.samples = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _owners(self) -> dict[int, int]:
        """Local TCP port -> pid of the process that owns it (connections to the server's port)."""
        owners = {}
        for conn in psutil.net_connections(kind="tcp"):
            if conn.raddr and conn.raddr.port == 5432 and conn.pid is not None:
                owners[conn.laddr.port] = conn.pid
        return owners

    def _watch(self) -> None:
        with self.engine.connect() as conn:
            own_port = conn.execute(sqlalchemy.text("SELECT inet_client_port()")).scalar_one()
            while not self.done.wait(self.every):
                rows = conn.execute(_ACTIVITY, {"names": self.databases}).all()
                conn.rollback()
                owners = self._owners()
                now: dict[tuple[int, str], int] = defaultdict(int)
                for port, database in rows:
                    if port != own_port and port in owners:
                        now[(owners[port], database)] += 1
                per_pid: dict[int, int] = defaultdict(int)
                for (pid, database), n in now.items():
                    self.most[(pid, database)] = max(self.most[(pid, database)], n)
                    per_pid[pid] += n
                for pid, n in per_pid.items():
                    self.most_per_pid[pid] = max(self.most_per_pid[pid], n)
                self.most_total = max(self.most_total, sum(per_pid.values()))
                self.samples += 1

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.done.set()
        self.thread.join(10)
        self.engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--epoch-seconds", type=float, default=0.3)
    parser.add_argument("--every", type=float, default=0.2, help="seconds between samples")
    parser.add_argument("--mlflow-db", action="store_true", help="MLflow's tracking store on PostgreSQL too")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more `search start` options")
    args = parser.parse_args()

    tag = uuid.uuid4().hex[:8]
    names = [f"hp_conn_optuna_{tag}"] + ([f"hp_conn_mlflow_{tag}"] if args.mlflow_db else [])
    admin = sqlalchemy.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sqlalchemy.NullPool)
    base = ADMIN_URL.rsplit("/", 1)[0]
    with admin.connect() as conn:
        for name in names:
            conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    try:
        command = [
            sys.executable, "-m", "search", "start", "--study", str(SLEEP_STUDY), "--name", "conn",
            "--trials", str(args.trials), "--workers", str(args.workers), "--storage", f"{base}/{names[0]}",
            "--study-option", f"epochs={args.epochs}", "--study-option", f"epoch_seconds={args.epoch_seconds}",
            "--heartbeat-interval", "1", "--grace-period", "3", "--no-retrain", "--patience", "off", "--quiet",
            *(["--tracking-uri", f"{base}/{names[1]}"] if args.mlflow_db else []), *args.extra,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_") and k != "MLFLOW_TRACKING_URI"}
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("EXTRA_PYTHONPATH"), str(ROOT)])),
            OMP_NUM_THREADS="1",
        )
        with tempfile.TemporaryDirectory() as workdir, Sampler(ADMIN_URL, names, args.every) as sampler:
            started = time.perf_counter()
            proc = subprocess.Popen(command, cwd=workdir, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
            out, _ = proc.communicate(timeout=900)
            took = time.perf_counter() - started
        print(f"search start exited {proc.returncode} in {took:.0f} s; {sampler.samples} samples")
        if proc.returncode != 0:
            print(out[-4000:])
        for pid in sorted(sampler.most_per_pid):
            role = "search start" if pid == proc.pid else f"worker {pid}"
            by_db = ", ".join(
                f"{db.split('_')[2]} {sampler.most[(pid, db)]}" for db in names if (pid, db) in sampler.most
            )
            print(f"  {role:<20} at most {sampler.most_per_pid[pid]} at once ({by_db})")
        print(f"  all processes together: at most {sampler.most_total} at once")
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
