"""Soak: a study under fire, then a count of what it lost.

``search start --workers 0`` follows a study of short sleep-study trials while this script keeps
``--workers`` ``search worker`` processes running, SIGKILLs a random one every few seconds (and
starts a replacement, as a preempted node is replaced), freezes a random one now and then with
SIGSTOP and thaws it with SIGCONT after 1 to 3 grace periods (a node that swapped, or lost its
network and got it back: its trial is taken over, and it must do no damage when it wakes), restarts
PostgreSQL ``--pg-restarts`` times mid-study and, with ``--mlflow-server``, stops the MLflow
tracking server the workers log to over HTTP for ``--mlflow-down`` seconds ``--mlflow-restarts``
times. When the study is done it reads the trials back and prints:

    requested  the trial budget
    finished   logical trials that reached a final state (a retry continues its trial)
    lost       logical trials whose final state is FAIL (the sleep study never fails by itself)
    duplicated logical trials that finished more than once, plus any beyond the budget
    running    trials left RUNNING or WAITING

With ``--pruner asha[:...]`` (freeze-thaw) a logical trial is a chain of attempts, some of them
paused (PRUNED with ``paused_at``) and continued later: its outcome is its final attempt, the one
no later attempt continues (a resumption names the paused attempt in ``resumed_from``, a retry lists
the attempt it follows last in ``retry_history``); a COMPLETE attempt that is continued, or two
final attempts, count as duplicated. While the study runs the soak also checks, every few seconds,
that every paused trial not yet resumed still has its checkpoint folder (``trial-N``), and prints
how many checkpoints of paused trials went missing; and that every running attempt that has reported
an epoch still has its checkpoint folder. With ``asha:...,disk=SIZE`` it counts the paused trials whose
checkpoints were evicted (they end pruned, no longer paused). With ``--pruner pbt[:...]``
(population-based training; the sleep study's ``lr`` is mutable) a replaced attempt is continued by
its copy, and the soak counts the copies that did not start from the epoch they copied.

and the MLflow runs by status (a dead attempt's run ends KILLED; none may be left RUNNING), and the
workers that exited non-zero by themselves (the database restarts are outages they ride out: none).

The target is requested == finished, 0 / 0 / 0, and no worker exiting non-zero. Not a test: it
takes minutes, and it restarts the local PostgreSQL cluster (with pg_ctlcluster; it is always left
running).

    python benchmarks/soak.py                       # 200 trials, 8 workers, a kill every ~4 s
    python benchmarks/soak.py --trials 60 --workers 4 --kill-every 6
    python benchmarks/soak.py --pause-every 10 --mlflow-server --seed 1   # the whole round-two soak
    python benchmarks/soak.py --trials 60 --workers 4 --kill-every 10 --pause-every 10 --pg-restarts 0 \
        --pruner asha:min=1,factor=2 --sampler random --epochs 16   # freeze-thaw: trials pause and resume
    python benchmarks/soak.py --trials 40 --workers 3 --kill-every 10 --pause-every 10 --pg-restarts 0 \
        --pruner pbt:interval=2,min_trials=3 --sampler random --epochs 8   # population-based training
    python benchmarks/soak.py --trials 30 --workers 4 --kill-every 20 --pg-restarts 0 --pgbouncer 2

``--pgbouncer N`` runs the study through a PgBouncer in transaction mode with N server connections
(``benchmarks/pgbouncer.py``, started and stopped by the soak); either way the soak prints the most
server connections (backends) the study's database had at once, sampled every half second.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import sqlalchemy

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/soak.py` from anywhere: the checkout's packages
    sys.path.insert(0, str(ROOT))

from benchmarks.pgbouncer import PgBouncer  # noqa: E402
from search.observation import continued_attempts, paused_now  # noqa: E402

SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"
STUDY = "soak"
GRACE_S = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MlflowServer:
    """An MLflow tracking server on a fixed port, stopped and started again on the same one."""

    def __init__(self, store_url: str, workdir: Path, env: dict[str, str]) -> None:
        self.port, self.workdir, self.env = free_port(), workdir, env
        self.cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
                    "--workers", "2", "--backend-store-uri", store_url,
                    "--artifacts-destination", str(workdir / "mlartifacts")]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.back_at: float | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> None:
        import urllib.request

        with open(self.workdir / "logs" / "mlflow-server.log", "ab") as out:
            self.proc = subprocess.Popen(self.cmd, cwd=self.workdir, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise SystemExit(f"the MLflow server did not answer within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--kill-every", type=float, default=4.0, help="mean seconds between worker kills")
    parser.add_argument("--pg-restarts", type=int, default=2)
    parser.add_argument(
        "--pause-every",
        type=float,
        default=0,
        help="mean seconds between SIGSTOP/SIGCONT pauses of a random worker (0: none)",
    )
    parser.add_argument(
        "--mlflow-server",
        action="store_true",
        help="log to an MLflow tracking server over HTTP (its store: another PostgreSQL database)",
    )
    parser.add_argument("--mlflow-restarts", type=int, default=2)
    parser.add_argument("--mlflow-down", type=float, default=20, help="seconds the tracking server stays down")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--pruner", default="none", help="the study's --pruner, e.g. asha:min=1,factor=2 or pbt [none]")
    parser.add_argument("--sampler", default="tpe", help="the study's --sampler (random: more resumptions) [tpe]")
    parser.add_argument("--epoch-seconds", type=float, default=0.3)
    parser.add_argument("--max-retries", type=int, default=10, help="retries per logical trial")
    parser.add_argument("--admin-url", default="postgresql+psycopg2://root@127.0.0.1:5432/test")
    parser.add_argument(
        "--pgbouncer",
        type=int,
        default=0,
        metavar="N",
        help="run the study through a PgBouncer (transaction mode) with N server connections [0: none]",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="keep project and logs here [a temporary directory]")
    return parser.parse_args()


class Soak:
    """The follower, the workers and the database of one soak run."""

    def __init__(self, args: argparse.Namespace, url: str, workdir: Path) -> None:
        self.args, self.url, self.workdir = args, url, workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
        self.env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        self.where = ["--storage", url, "--project-dir", str(workdir / "project")]
        self.mlflow: MlflowServer | None = None
        if args.mlflow_server:
            self.mlflow = MlflowServer(f"{url}_mlflow", workdir, self.env)
            self.where += ["--tracking-uri", self.mlflow.uri]
        self.workers: list[subprocess.Popen[bytes]] = []
        self.started = self.killed = self.restarts = self.pauses = self.mlflow_restarts = 0
        self.frozen: dict[subprocess.Popen[bytes], float] = {}  # a stopped worker -> when to thaw it
        self.failed_exits: dict[int, int] = defaultdict(int)  # exit code -> workers (not killed by the soak)
        self.checkpoints = workdir / "project" / "checkpoints" / STUDY
        self.paused_checks = 0  # looks at the paused trials' checkpoints while the study ran
        self.paused_seen: set[int] = set()  # paused attempts seen (their numbers)
        self.missing: set[int] = set()  # logical trials whose checkpoints went missing while paused
        self.live_seen: set[int] = set()  # running attempts seen with a checkpoint (their numbers)
        self.live_missing: set[int] = set()  # running attempts whose checkpoints went missing
        self.peak_backends = 0  # the most server connections to the study's database seen at once
        self.bouncer: PgBouncer | None = None
        self.peak_clients = 0  # with a PgBouncer: the most client connections to it seen at once

    def spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.logs / log, "ab") as out:
            return subprocess.Popen([sys.executable, "-m", "search", *args], cwd=self.workdir, env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT)  # fmt: skip

    def start_follower(self) -> subprocess.Popen[bytes]:
        a = self.args
        return self.spawn([
            "start", "--study", str(SLEEP_STUDY), "--name", STUDY, "--trials", str(a.trials), "--workers", "0",
            "--heartbeat-interval", "1", "--grace-period", str(GRACE_S), "--max-retries", str(a.max_retries),
            "--checkpoint-every", "0",  # every epoch: the trials are a second long, and resuming is under test
            "--pruner", a.pruner, "--sampler", a.sampler, "--no-retrain", "--quiet",
            "--study-option", f"epochs={a.epochs}", "--study-option", f"epoch_seconds={a.epoch_seconds}",
            "--seed", str(a.seed), *self.where,
        ], "start.log")  # fmt: skip

    def start_worker(self) -> None:
        self.started += 1
        self.workers.append(self.spawn(["worker", "--name", STUDY, *self.where], f"worker-{self.started:03d}.log"))

    def kill_one(self, rng: random.Random) -> None:
        alive = [p for p in self.workers if p.poll() is None]
        if alive:
            victim = rng.choice(alive)
            victim.kill()
            victim.wait()
            self.workers.remove(victim)
            self.frozen.pop(victim, None)
            self.killed += 1
            self.start_worker()

    def pause_one(self, rng: random.Random) -> None:
        """SIGSTOP a random worker for 1 to 3 grace periods: long enough, mostly, for its trial to be
        taken over (and perhaps while it holds the study lock)."""
        awake = [p for p in self.workers if p.poll() is None and p not in self.frozen]
        if awake:
            victim = rng.choice(awake)
            victim.send_signal(signal.SIGSTOP)
            self.frozen[victim] = time.monotonic() + rng.uniform(1, 3) * GRACE_S
            self.pauses += 1

    def thaw_due(self, everyone: bool = False) -> None:
        for proc, when in list(self.frozen.items()):
            if everyone or time.monotonic() >= when:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                del self.frozen[proc]

    def keep_staffed(self) -> None:
        """A worker that exited with an error is replaced; one that found the study done is not."""
        for proc in list(self.workers):
            if proc.poll() not in (None, 0):
                self.workers.remove(proc)
                self.failed_exits[proc.returncode] += 1
                print(f"  a worker exited with code {proc.returncode}; starting another", flush=True)
                self.start_worker()

    def stop_workers(self, grace: float = 30) -> None:
        self.thaw_due(everyone=True)
        deadline = time.monotonic() + grace
        for proc in self.workers:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode != 0:
                self.failed_exits[proc.returncode] += 1


def wait_until_ready(url: str, timeout: float = 120) -> None:
    """Until ``search start`` has created the study and its MLflow parent run (workers need both)."""
    engine = sqlalchemy.create_engine(url, pool_pre_ping=True)
    query = sqlalchemy.text(
        "SELECT count(*) FROM studies s JOIN study_user_attributes a ON a.study_id = s.study_id "
        "WHERE s.study_name = :n AND a.key = 'hpsearch.mlflow_parent_run_id'"
    )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                with engine.connect() as conn:
                    if conn.execute(query, {"n": STUDY}).scalar():
                        return
            except sqlalchemy.exc.ProgrammingError:  # no tables yet
                pass
            time.sleep(0.5)
    finally:
        engine.dispose()
    raise SystemExit("the study was not created in time; see start.log")


def finished_count(engine: sqlalchemy.engine.Engine) -> int:
    query = sqlalchemy.text(
        "SELECT count(*) FROM trials t WHERE t.state IN ('COMPLETE', 'PRUNED', 'FAIL') AND NOT EXISTS "
        "(SELECT 1 FROM trial_system_attributes a WHERE a.trial_id = t.trial_id AND a.key = 'failed_trial')"
    )
    try:
        with engine.connect() as conn:
            return int(conn.execute(query).scalar() or 0)
    except sqlalchemy.exc.OperationalError:  # mid-restart
        return 0


def restart_postgres() -> None:
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True,
                   capture_output=True, timeout=120)  # fmt: skip


def ensure_postgres_running() -> None:
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]
    if subprocess.run([*command, "status"], capture_output=True, timeout=30).returncode != 0:
        subprocess.run([*command, "start"], check=True, capture_output=True, timeout=120)


def run(soak: Soak) -> int:
    """Run the study under fire; return the follower's exit code."""
    args = soak.args
    rng = random.Random(args.seed)
    if soak.mlflow is not None:
        soak.mlflow.start()
    follower = soak.start_follower()
    wait_until_ready(soak.url)
    for _ in range(args.workers):
        soak.start_worker()
    # Restarts happen when these numbers of trials have finished (e.g. at 1/3 and 2/3 of the budget).
    restart_at = [args.trials * (i + 1) // (args.pg_restarts + 1) for i in range(args.pg_restarts)]
    # The tracking server goes down half-way between them (e.g. at 1/6 and 1/2 of the budget).
    n = args.mlflow_restarts if soak.mlflow is not None else 0
    mlflow_at = [int(args.trials * (2 * i + 1) / (2 * (n + 1))) for i in range(n)]
    engine = sqlalchemy.create_engine(soak.url, pool_pre_ping=True)
    next_kill = time.monotonic() + rng.uniform(0.5, 1.5) * args.kill_every
    next_pause = time.monotonic() + rng.uniform(0.5, 1.5) * args.pause_every if args.pause_every else float("inf")
    deadline = time.monotonic() + args.timeout
    next_check = time.monotonic() + 2
    try:
        while follower.poll() is None:
            if time.monotonic() > deadline:
                raise SystemExit(f"the study did not finish within {args.timeout:.0f} s")
            if time.monotonic() >= next_kill:
                soak.kill_one(rng)
                next_kill = time.monotonic() + rng.uniform(0.5, 1.5) * args.kill_every
            if time.monotonic() >= next_pause:
                soak.pause_one(rng)
                next_pause = time.monotonic() + rng.uniform(0.5, 1.5) * args.pause_every
            soak.thaw_due()
            mlflow = soak.mlflow
            if mlflow is not None and mlflow.back_at is None and mlflow_at and finished_count(engine) >= mlflow_at[0]:
                mlflow_at.pop(0)
                print(f"  stopping the MLflow server for {args.mlflow_down:g} s ({finished_count(engine)} trials "
                      "finished)", flush=True)  # fmt: skip
                mlflow.stop()
                mlflow.back_at = time.monotonic() + args.mlflow_down
            if mlflow is not None and mlflow.back_at is not None and time.monotonic() >= mlflow.back_at:
                mlflow.start()
                mlflow.back_at = None
                soak.mlflow_restarts += 1
            if restart_at and finished_count(engine) >= restart_at[0]:
                restart_at.pop(0)
                print(f"  restarting PostgreSQL ({finished_count(engine)} trials finished)", flush=True)
                restart_postgres()
                soak.restarts += 1
            soak.keep_staffed()
            soak.peak_backends = max(soak.peak_backends, backends(engine))
            if soak.bouncer is not None:
                pools = [row for row in soak.bouncer.show("POOLS") if row["database"] != "pgbouncer"]
                soak.peak_clients = max(soak.peak_clients, sum(r["cl_active"] + r["cl_waiting"] for r in pools))
            if time.monotonic() >= next_check:
                check_paused_checkpoints(soak)
                next_check = time.monotonic() + 2
            time.sleep(0.5)
    finally:
        engine.dispose()
        soak.stop_workers()
        if follower.poll() is None:
            follower.kill()
        if soak.mlflow is not None and soak.mlflow.back_at is not None:
            soak.mlflow.start()  # back for the count of runs
    return int(follower.returncode)


def backends(engine: sqlalchemy.engine.Engine) -> int:
    query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    try:
        with engine.connect() as conn:
            return int(conn.execute(sqlalchemy.text(query)).scalar_one()) + 1  # and this one's
    except sqlalchemy.exc.OperationalError:  # mid-restart
        return 0


def read_trials(url: str) -> list[Any]:
    import storage

    backend = storage.open_optuna_storage(url)
    try:
        return backend.get_all_trials(backend.get_study_id_from_name(STUDY))
    finally:
        backend.engine.dispose()


def logical(trial: Any) -> int:
    return int(trial.system_attrs.get("failed_trial", trial.number))


def stood_down(trial: Any) -> bool:
    return str(trial.user_attrs.get("fail_reason", "")).startswith("not needed")


def check_paused_checkpoints(soak: Soak) -> None:
    """Every paused trial not yet resumed must still have its checkpoints, and every running attempt
    that has reported an epoch (its checkpoint is written before the report) its folder. A folder
    that is missing counts only if the trial is still paused (the same attempt running) after the
    look and the study still runs (its last worker removes the checkpoints of the paused trials
    nobody resumed once it is over; ``asha:disk`` removes those it evicts, no longer paused)."""
    try:
        trials = read_trials(soak.url)
        before = paused_now(trials)
        running = {t.number: t for t in trials if t.state.name == "RUNNING" and t.intermediate_values}
        gone = {n for n in before if not (soak.checkpoints / f"trial-{n}").is_dir()}
        live_gone = {n for n, t in running.items() if not (soak.checkpoints / f"trial-{logical(t)}").is_dir()}
        after = read_trials(soak.url)
    except Exception:  # noqa: BLE001 - a look that failed is skipped, not a fault of the study
        return
    soak.paused_checks += 1
    soak.paused_seen |= {t.number for t in before.values()}
    soak.live_seen |= set(running)
    still = paused_now(after)
    if any(t.state.name in ("RUNNING", "WAITING") for t in after):
        lost = {n for n in gone if n in still and still[n].number == before[n].number}
        if lost - soak.missing:
            print(f"  checkpoints of paused trials {sorted(lost - soak.missing)} are missing", flush=True)
        soak.missing |= lost
    live_lost = {t.number for t in after if t.number in live_gone and t.state.name == "RUNNING"}
    if live_lost - soak.live_missing:
        print(f"  checkpoints of running attempts {sorted(live_lost - soak.live_missing)} are missing", flush=True)
    soak.live_missing |= live_lost


def tally(url: str, budget: int) -> dict[str, int]:
    trials = read_trials(url)
    attempts: dict[int, list[Any]] = defaultdict(list)
    for trial in trials:
        attempts[logical(trial)].append(trial)
    # A logical trial's outcome: its final attempt, the one no later attempt continues (a paused
    # attempt is continued by its resumption, a dead one by its retry). A retry queued while its
    # trial's own tell was landing stands down as FAIL ("not needed: trial N finished") after that
    # attempt: it is bookkeeping, not a lost trial (nor a final attempt).
    taken = continued_attempts(trials)
    finals = {n: [t for t in tries if t.number not in taken and not stood_down(t)] for n, tries in attempts.items()}
    final = {n: max(ends or tries, key=lambda t: t.number) for (n, ends), tries in zip(finals.items(),
             attempts.values(), strict=True)}  # fmt: skip
    ended = {n: t for n, t in final.items() if t.state.name in ("COMPLETE", "PRUNED", "FAIL")}
    # Finished twice: two final attempts that finished, or a COMPLETE attempt that was continued.
    twice = sum(
        sum(t.state.name in ("COMPLETE", "PRUNED") for t in ends) > 1
        or any(t.state.name == "COMPLETE" and t.number in taken for t in attempts[n])
        for n, ends in finals.items()
    )
    retries = [t for t in trials if "failed_trial" in t.system_attrs and t.state.name in ("COMPLETE", "PRUNED")]
    return {
        "requested": budget,
        "finished": len(ended),
        "lost": sum(t.state.name == "FAIL" for t in ended.values()),
        "duplicated": twice + max(0, len(attempts) - budget),
        "running": sum(t.state.name in ("RUNNING", "WAITING") for t in trials),
        "attempts": len(trials),
        "resumed": sum(t.user_attrs.get("resumed_from_epoch", 0) > 0 for t in retries),
        "retried": len(retries),
        "stood_down": sum(stood_down(t) for t in trials),
        # Every pause, the evicted ones (``asha:disk``: no longer paused) included.
        "paused": sum(
            t.state.name == "PRUNED" and bool({"paused_at", "paused_evicted"} & set(t.user_attrs)) for t in trials
        ),  # fmt: skip
        # A resumption continues the paused attempt it names; a retry of one inherits the name.
        "resumptions": sum("resumed_from" in t.user_attrs and first_of_continuation(t) for t in trials),
        # A retry of a resumed trial (its worker died while it trained) inherits ``resumed_from``.
        "resumed_retried": sum(
            "resumed_from" in t.user_attrs
            and t.user_attrs["resumed_from"] != (t.system_attrs.get("retry_history") or [None])[-1]
            and not stood_down(t)
            for t in trials
        ),
        "never_resumed": len(paused_now(trials)),
        "evicted": sum(t.state.name == "PRUNED" and "paused_evicted" in t.user_attrs for t in trials),
        "evicted_continued": sum("paused_evicted" in t.user_attrs and t.number in taken for t in trials),
        # Population-based training: replaced attempts, and the copies that continue them (a copy's
        # retry after a kill inherits its lineage: only the copy itself starts from the copied epoch).
        "replaced": sum(t.state.name == "PRUNED" and "exploited_at" in t.user_attrs for t in trials),
        "copies": len(copies := [t for t in trials if "pbt_epoch" in t.user_attrs and first_of_continuation(t)]),
        "copies_started_elsewhere": sum(
            t.state.name in ("COMPLETE", "PRUNED")
            and t.user_attrs.get("resumed_from_epoch") != t.user_attrs["pbt_epoch"]
            for t in copies
        ),
    }


def first_of_continuation(trial: Any) -> bool:
    """A continuation itself (a resumption, a copy), not the retry of one after its worker died."""
    return trial.user_attrs.get("resumed_from") == (trial.system_attrs.get("retry_history") or [None])[-1]


def mlflow_runs(project: Path, server: MlflowServer | None) -> dict[str, int]:
    """The study's MLflow runs (the parent and one per attempt) by status; none may be left RUNNING."""
    from mlflow import MlflowClient

    import storage

    client = MlflowClient(server.uri if server else storage.resolve_tracking(None, project, None).tracking_uri)
    experiment = client.get_experiment_by_name(STUDY)
    statuses: dict[str, int] = defaultdict(int)
    if experiment is not None:
        for found in client.search_runs([experiment.experiment_id], max_results=50000):
            statuses[found.info.status] += 1
    return dict(statuses)


def pgbouncer_stats(bouncer: PgBouncer, database: str, clients: int) -> str:
    [stats] = [row for row in bouncer.show("STATS") if row["database"] == database]
    return (
        f"; PgBouncer: at most {clients} client connections at once, {stats['total_xact_count']} "
        f"transactions, clients waited {float(stats['total_wait_time']) / 1e6:.1f} s in all for a server connection"
    )


def main() -> None:
    args = parse_args()
    name = f"hpsearch_soak_{uuid.uuid4().hex[:8]}"
    admin = sqlalchemy.create_engine(args.admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    databases = [name, f"{name}_mlflow"] if args.mlflow_server else [name]
    with admin.connect() as conn:
        for database in databases:
            conn.execute(sqlalchemy.text(f'CREATE DATABASE "{database}"'))
    url = args.admin_url.rsplit("/", 1)[0] + f"/{name}"
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="hpsearch-soak-"))
    bouncer = PgBouncer(args.admin_url, pool_size=args.pgbouncer).start() if args.pgbouncer else None
    soak = Soak(args, bouncer.url(url) if bouncer else url, workdir)
    soak.bouncer = bouncer
    started = time.monotonic()
    pauses = f"a pause every ~{args.pause_every:g} s, " if args.pause_every else ""
    mlflow = f", {args.mlflow_restarts} MLflow server outages of {args.mlflow_down:g} s" if args.mlflow_server else ""
    print(f"soak: {args.trials} trials, {args.workers} workers, a kill every ~{args.kill_every:g} s, {pauses}"
          f"{args.pg_restarts} PostgreSQL restarts{mlflow}; seed {args.seed}; logs in {soak.logs}"
          + (f"; through PgBouncer (transaction mode, {args.pgbouncer} server connections)" if bouncer else ""),
          flush=True)  # fmt: skip
    try:
        code = run(soak)
        counts = tally(url, args.trials)
        runs = mlflow_runs(workdir / "project", soak.mlflow)
        pooled = pgbouncer_stats(bouncer, name, soak.peak_clients) if bouncer else ""
    finally:
        if soak.mlflow is not None:
            soak.mlflow.stop()
        if bouncer is not None:
            bouncer.stop()
        ensure_postgres_running()
        with admin.connect() as conn:
            for database in databases:
                conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()
    print(f"done in {time.monotonic() - started:.0f} s: search start exited {code}; {soak.killed} workers killed, "
          f"{soak.pauses} paused, {soak.started} started, {soak.restarts} PostgreSQL restarts, "
          f"{soak.mlflow_restarts} MLflow server restarts; {counts['attempts']} attempts, "
          f"{counts['retried']} retries finished ({counts['resumed']} resumed from a checkpoint), "
          f"{counts['stood_down']} stood down (their trial had finished)")  # fmt: skip
    print(f"trials requested {counts['requested']}, finished {counts['finished']}, lost {counts['lost']}, "
          f"duplicated {counts['duplicated']}, left RUNNING {counts['running']}")  # fmt: skip
    if args.pruner.split(":")[0] == "asha":
        print(f"freeze-thaw: {counts['paused']} pauses, {counts['resumptions']} resumptions "
              f"({counts['resumed_retried']} retries of resumed trials after a kill or freeze), "
              f"{counts['never_resumed']} paused trials never resumed; checkpoints of paused trials looked at "
              f"{soak.paused_checks} times ({len(soak.paused_seen)} paused attempts seen), missing "
              f"{len(soak.missing)}")  # fmt: skip
    if args.pruner.split(":")[0] == "asha" and "disk=" in args.pruner:
        print(f"asha:disk: {counts['evicted']} paused trials' checkpoints evicted, {counts['evicted_continued']} "
              "of them continued all the same")  # fmt: skip
    if args.pruner.split(":")[0] == "pbt":
        print(
            f"population-based training: {counts['replaced']} trials replaced, {counts['copies']} copies, "
            f"{counts['copies_started_elsewhere']} of the finished copies did not start from the copied epoch"
        )
    print(f"checkpoints of running attempts looked at {soak.paused_checks} times ({len(soak.live_seen)} attempts "
          f"seen), missing {len(soak.live_missing)}")  # fmt: skip
    print(f"server connections to the study's database at most {soak.peak_backends} at once{pooled}")
    print("MLflow runs by status: " + ", ".join(f"{k} {v}" for k, v in sorted(runs.items())))
    exits = ", ".join(f"{n} with {code}" for code, n in sorted(soak.failed_exits.items())) or "none"
    print(f"workers that exited non-zero by themselves (the soak's SIGKILLs aside): {exits}")
    ok = counts["requested"] == counts["finished"] and counts["lost"] == counts["duplicated"] == counts["running"] == 0
    ok = ok and runs.get("RUNNING", 0) == 0 and not soak.failed_exits and not soak.missing and not soak.live_missing
    ok = ok and counts["copies_started_elsewhere"] == counts["evicted_continued"] == 0
    sys.exit(0 if ok and code == 0 else 1)


if __name__ == "__main__":
    main()
