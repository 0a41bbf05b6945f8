"""Coordination load: W simulated workers on hpsearch's real claim, report, heartbeat, reaper and finish code.

Each worker is a thread with a ``Coordinator`` of its own, so its own pool of PostgreSQL
connections sized as a real worker's (``storage.POOL_SIZE + storage.MAX_OVERFLOW``); the threads
are spread over ``--processes`` forked processes (no torch is imported), so that one interpreter's
lock does not stall the holder of the study lock. A worker joins the study (``Coordinator.join``,
``load``), then until ``--duration`` has passed: ``Coordinator.claim`` (which reaps dead trials
first), records who runs the trial (``storage.set_user_attrs``, as ``search worker`` does),
``suggest_params`` (TPE, through the worker's path), and runs the trial under ``heartbeat()`` (the
thread that beats and reaps), sleeping ``--trial-seconds`` split over ``--epochs`` epochs, each
reported through ``PruningHook`` (the pruner asked where it can decide); ``finish_ok`` tells the
final state. Only MLflow and training are left out (a run object that records nothing).

Printed for each W, against a fresh database (created, and dropped at the end):

  claims/s       claims begun in the measured window, over the window
  claim p50/p99  the worker's ``Coordinator.claim`` call, reap and lock wait included
  lock hold      mean time the study lock was held (from taken to released, commit included)
  connections    the most backends connected to the database at one sample (pg_stat_activity,
                 every 0.5 s), and per worker
  PG CPU         user + system CPU of those backends (/proc/<pid>/stat), per trial and as cores
                 busy over the window: PostgreSQL's client backends only (its WAL writer,
                 checkpointer and the other engineers' backends are not counted)
  xact/trial     transactions in the database (pg_stat_database.xact_commit + xact_rollback: a
                 read ends in a rollback; the monitor's own queries go to another database) per
                 trial finished, from the window's start to
                 the last worker's exit (trials in flight at the end are finished, not abandoned)

and the workers-per-study ceiling those imply. A study whose W workers each run trials of L
seconds asks for W / L claims per second (Little's law: each worker claims once per trial); the
study lock hands out at most C per second, since every claim counts and creates its trial under
it, one after another. So one study feeds at most W ≈ C · L workers:

  measured   C = the claims/s this run reached, printed only when the workers did nothing but
             claim (--trial-seconds 0): a floor on C, as here the clients share the server's cores
  lock bound C = 1 / (mean lock hold): the claims/s if the lock were never idle, its holders
             running at this run's speed

printed at L = 10 s, 1 min and 10 min. Long trials add load while they run (a heartbeat every
``--heartbeat-interval`` s and a reaping look about every half grace period per worker), which the
PG CPU per trial at the trial length run includes.

Workers that would not fit in the server's free connections are not started: each may hold
POOL_SIZE + MAX_OVERFLOW connections (a real worker 2 more when its MLflow store is a database), and the run leaves
``--connection-margin`` free for everyone else on the server. Such a W is reported as not run, with
the connections it needs: that is the finding, not an error.

    python benchmarks/bench_coordination.py --workers 4,16 --trial-seconds 0 --duration 20
    python benchmarks/bench_coordination.py --workers 100,300,1000 --trial-seconds 2 --duration 60
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import sqlalchemy

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import storage as st  # noqa: E402
from benchmarks.pgbouncer import PgBouncer  # noqa: E402
from search.coordination import Coordinator, heartbeat  # noqa: E402
from search.execution._finish import finish_ok  # noqa: E402
from search.execution._pruning import PruningHook  # noqa: E402
from search.execution._suggest import suggest_params  # noqa: E402
from search.settings import SearchSettings, StudyRecord  # noqa: E402

ADMIN_URL = os.environ.get("HPSEARCH_BENCH_PG", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")
STUDY = "coordination"
METRIC = "val_loss"
TRIAL_LENGTHS = {"10 s": 10.0, "1 min": 60.0, "10 min": 600.0}
CONNECTIONS_PER_WORKER = st.POOL_SIZE + st.MAX_OVERFLOW


class SpaceOfTwo:
    """The study's ``suggest``: two floats, as the sleep study's (no torch needed)."""

    def suggest(self, trial: Any) -> dict[str, float]:
        return {"x": trial.suggest_float("x", -2.0, 2.0), "lr": trial.suggest_float("lr", 1e-3, 0.5, log=True)}


class TimedCoordinator(Coordinator):
    """A worker's coordinator that also notes how long it held the study lock."""

    holds: list[float]

    @contextlib.contextmanager
    def lock(self, wait: bool = True) -> Iterator[Any]:
        with super().lock(wait) as conn:
            taken = time.perf_counter()
            yield conn
        self.holds.append(time.perf_counter() - taken)


class NoRun:
    """The trial's MLflow run, recording nothing: MLflow's cost is not coordination."""

    def finish(self, tags: Any, status: str) -> None:
        pass


@dataclass
class WorkerStats:
    claims: list[float] = field(default_factory=list)  # seconds per claim begun in the window
    suggests: list[float] = field(default_factory=list)
    holds: list[float] = field(default_factory=list)
    trials: int = 0
    pruned: int = 0
    errors: list[str] = field(default_factory=list)


def make_record(epochs: int, heartbeat_interval: int, grace_period: int) -> StudyRecord:
    settings = SearchSettings(sampler="tpe", heartbeat_interval=heartbeat_interval, grace_period=grace_period)
    return StudyRecord(study_ref="none", metric=METRIC, direction="minimize", search_epochs=epochs, settings=settings)


def run_trial(coordinator: Coordinator, study: Any, trials: Any, record: StudyRecord, trial: Any,
              args: argparse.Namespace, stats: WorkerStats, worker: str) -> None:  # fmt: skip
    """One simulated trial through the worker's own calls, from its claim on."""
    started = time.perf_counter()
    cpu_at_claim = time.process_time()
    with heartbeat(coordinator, study, trial):
        st.set_user_attrs(coordinator.storage, st.trial_id(trial), {"worker": worker, "host": "bench"})
        before = time.perf_counter()
        params = suggest_params(SpaceOfTwo(), coordinator.storage, trial)  # type: ignore[arg-type]  # a study's suggest
        stats.suggests.append(time.perf_counter() - before)
        hook = PruningHook(trial, METRIC, trials, patience=0)
        history: list[dict[str, float]] = []
        for epoch in range(args.epochs):
            time.sleep(args.trial_seconds / args.epochs)
            value = (params["x"] - 0.3) ** 2 + 1.0 / (epoch + 1)
            history.append({METRIC: value})
            if hook(epoch, {METRIC: value}):
                break
        finish(coordinator, study, record, trial, hook, history, started, cpu_at_claim)
    stats.trials += 1
    stats.pruned += hook.pruned_epoch is not None


def finish(coordinator: Coordinator, study: Any, record: StudyRecord, trial: Any, hook: PruningHook,
           history: list[dict[str, float]], started: float, cpu_at_claim: float) -> None:  # fmt: skip
    """Tell the trial's end through the worker's ``finish_ok``: no MLflow run, a result of its curve alone."""
    ctx = SimpleNamespace(coordinator=coordinator, optuna_study=study, record=record, cpu_at_claim=cpu_at_claim)
    result = SimpleNamespace(history=history, resumed_from_epoch=0, epochs_run=len(history), stopped_early=False,
                             fit_seconds=time.perf_counter() - started, callback_seconds=0.0, best_epoch=0,
                             samples_per_second=0.0)  # fmt: skip
    finish_ok(ctx, trial, NoRun(), result, hook, started)  # type: ignore[arg-type]


def worker_thread(url: str, record: StudyRecord, args: argparse.Namespace, ready: Any, go: Any,
                  stats: WorkerStats, name: str) -> None:  # fmt: skip
    try:
        coordinator = TimedCoordinator(url, STUDY, schema_checked=True)
        coordinator.holds = stats.holds
        study = coordinator.load(worker_ordinal=coordinator.join())
        trials = st.StudyTrials(coordinator.storage, st.study_id(study))
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the other workers go on
        stats.errors.append(f"joining: {type(exc).__name__}: {exc}")
        ready.release()
        return
    ready.release()
    go.wait()
    deadline = time.monotonic() + args.duration
    try:
        while time.monotonic() < deadline:
            before = time.perf_counter()
            trial, _ = coordinator.claim(study, trials)
            stats.claims.append(time.perf_counter() - before)
            if trial is None:
                break
            run_trial(coordinator, study, trials, record, trial, args, stats, name)
    except Exception as exc:  # noqa: BLE001
        stats.errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    finally:
        coordinator.storage.engine.dispose()


def worker_process(url: str, record: StudyRecord, args: argparse.Namespace, names: list[str], ready: Any, go: Any,
                   out: Any) -> None:  # fmt: skip
    """Run ``names`` worker threads; send their stats back once they are all done."""
    stats = [WorkerStats() for _ in names]
    local_ready = threading.Semaphore(0)
    threads = [threading.Thread(target=worker_thread, args=(url, record, args, local_ready, go, s, n), daemon=True)
               for s, n in zip(stats, names, strict=True)]  # fmt: skip
    for thread in threads:
        thread.start()
    for _ in threads:
        local_ready.acquire()
        ready.release()
    for thread in threads:
        thread.join()
    out.put([(s.claims, s.suggests, s.holds, s.trials, s.pruned, s.errors) for s in stats])


# -- the server side ----------------------------------------------------------------------


def server_capacity(admin: sqlalchemy.Engine) -> tuple[int, int, int]:
    """max_connections, superuser_reserved_connections and the client connections open now (all databases)."""
    with admin.connect() as conn:
        max_conn = int(conn.execute(sqlalchemy.text("SHOW max_connections")).scalar_one())
        reserved = int(conn.execute(sqlalchemy.text("SHOW superuser_reserved_connections")).scalar_one())
        in_use = int(conn.execute(sqlalchemy.text("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                                                  "'client backend'")).scalar_one())  # fmt: skip
    return max_conn, reserved, in_use


def backends(admin: sqlalchemy.Engine, database: str) -> list[int]:
    with admin.connect() as conn:
        rows = conn.execute(sqlalchemy.text("SELECT pid FROM pg_stat_activity WHERE datname = :d"), {"d": database})
        return [int(pid) for (pid,) in rows]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of process ``pid`` (None once it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def transactions(admin: sqlalchemy.Engine, database: str) -> int:
    """Transactions ended in ``database``: committed, and rolled back (how a read-only block ends)."""
    with admin.connect() as conn:
        query = sqlalchemy.text("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = :d")
        return int(conn.execute(query, {"d": database}).scalar_one())


class Monitor(threading.Thread):
    """Samples the database's backends every half second: how many, and their CPU."""

    def __init__(self, admin: sqlalchemy.Engine, database: str) -> None:
        super().__init__(daemon=True)
        self.admin, self.database = admin, database
        self.stop = threading.Event()
        self.most = 0
        self.start_cpu: dict[int, float] = {}  # pid -> CPU when first seen in the window (0 if it began in it)
        self.last_cpu: dict[int, float] = {}
        self.measuring = False

    def run(self) -> None:
        while not self.stop.wait(0.5):
            pids = backends(self.admin, self.database)
            self.most = max(self.most, len(pids))
            if not self.measuring:
                continue
            for pid in pids:
                cpu = cpu_seconds(pid)
                if cpu is not None:
                    self.last_cpu[pid] = cpu
                    self.start_cpu.setdefault(pid, 0.0)

    def begin(self) -> None:
        for pid in backends(self.admin, self.database):
            cpu = cpu_seconds(pid)
            if cpu is not None:
                self.start_cpu[pid] = self.last_cpu[pid] = cpu
        self.measuring = True

    def cpu(self) -> float:
        return sum(self.last_cpu[pid] - self.start_cpu.get(pid, 0.0) for pid in self.last_cpu)


@contextlib.contextmanager
def fresh_database(admin: sqlalchemy.Engine) -> Iterator[tuple[str, str]]:
    name = f"hp_coord_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    try:
        yield name, admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"),
                         {"d": name})  # fmt: skip
            conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}"'))


# -- one run ------------------------------------------------------------------------------


@dataclass
class Result:
    database: str
    workers: int
    claims_per_s: float
    claim_p50: float
    claim_p99: float
    hold_mean: float
    suggest_p50: float
    connections: int
    pg_cpu: float
    window: float
    trials: int
    pruned: int
    xacts: int
    errors: list[str]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(admin: sqlalchemy.Engine, workers: int, args: argparse.Namespace, bouncer: PgBouncer | None = None) -> Result:
    record = make_record(args.epochs, args.heartbeat_interval, args.grace_period)
    with fresh_database(admin) as (database, url):
        url = bouncer.url(url) if bouncer else url
        creator = Coordinator(url, STUDY)
        creator.create_or_resume(record, budget=10**9)
        creator.storage.engine.dispose()  # before the fork: no child may inherit its connections
        processes = max(1, min(args.processes, workers))
        names = [f"bench:{i}" for i in range(workers)]
        shares = [names[i::processes] for i in range(processes)]
        context = mp.get_context("fork")
        ready, go, out = context.Semaphore(0), context.Event(), context.Queue()
        children = [context.Process(target=worker_process, args=(url, record, args, share, ready, go, out))
                    for share in shares]  # fmt: skip
        monitor = Monitor(admin, database)
        monitor.start()
        for child in children:
            child.start()
        for _ in range(workers):
            ready.acquire()
        monitor.begin()
        xact_before = transactions(admin, database)
        started = time.perf_counter()
        go.set()
        gathered = [stat for _ in children for stat in out.get()]
        window = min(args.duration, time.perf_counter() - started)
        for child in children:
            child.join()
        monitor.stop.set()
        monitor.join()
        time.sleep(1.5)  # backends report their commits to the statistics as they exit
        xacts = transactions(admin, database) - xact_before
    claims = [c for g in gathered for c in g[0]]
    return Result(
        database=database, workers=workers, claims_per_s=len(claims) / window, claim_p50=percentile(claims, 0.5),
        claim_p99=percentile(claims, 0.99), hold_mean=statistics.fmean([h for g in gathered for h in g[2]] or [0.0]),
        suggest_p50=percentile([s for g in gathered for s in g[1]], 0.5), connections=monitor.most,
        pg_cpu=monitor.cpu(), window=window, trials=sum(g[3] for g in gathered), pruned=sum(g[4] for g in gathered),
        xacts=xacts, errors=[e for g in gathered for e in g[5]],
    )  # fmt: skip


def print_result(r: Result, saturated: bool) -> None:
    """``saturated``: the workers did nothing but claim (``--trial-seconds 0``), so the claims/s
    measured are what the study lock gave, not what the workers asked for."""
    ms = 1000
    trials = max(r.trials, 1)
    print(f"W={r.workers:<5} claims/s {r.claims_per_s:7.1f}   claim p50 {r.claim_p50 * ms:7.1f} ms  "
          f"p99 {r.claim_p99 * ms:7.1f} ms   lock hold {r.hold_mean * ms:6.2f} ms   suggest p50 "
          f"{r.suggest_p50 * ms:6.1f} ms", flush=True)  # fmt: skip
    print(f"        connections {r.connections} ({r.connections / r.workers:.2f} per worker)   PG CPU "
          f"{r.pg_cpu / trials * ms:6.2f} ms/trial, {r.pg_cpu / r.window:.2f} cores   xact/trial "
          f"{r.xacts / trials:5.1f}   trials {r.trials} ({r.pruned} pruned) in {r.window:.0f} s")  # fmt: skip
    lock_rate = 1 / r.hold_mean if r.hold_mean else float("nan")
    measured = saturated and r.claims_per_s
    ceilings = "  ".join(f"{label}: " + (f"{r.claims_per_s * s:,.0f} measured, " if measured else "")
                         + f"{lock_rate * s:,.0f} lock bound" for label, s in TRIAL_LENGTHS.items())  # fmt: skip
    print(f"        workers per study at trial length  {ceilings}", flush=True)
    for error in sorted(set(r.errors))[:5]:
        print(f"        error ({r.errors.count(error)} workers): {error}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="100,300,1000", help="worker counts W, comma-separated [100,300,1000]")
    parser.add_argument("--trial-seconds", type=float, default=0.0, help="simulated length of a trial [0]")
    parser.add_argument("--epochs", type=int, default=4, help="epochs (reported values) per trial [4]")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of claiming per W [30]")
    parser.add_argument("--processes", type=int, default=2 * len(os.sched_getaffinity(0)),
                        help="processes the worker threads are spread over [2 per core]")  # fmt: skip
    parser.add_argument("--heartbeat-interval", type=int, default=SearchSettings.heartbeat_interval,
                        help="seconds between heartbeats [the product's default]")  # fmt: skip
    parser.add_argument("--grace-period", type=int, default=SearchSettings.grace_period)
    parser.add_argument("--connection-margin", type=int, default=20,
                        help="connections left free for everyone else on the server [20]")  # fmt: skip
    parser.add_argument("--admin-url", default=ADMIN_URL, help="a database to create the benchmark's in [%(default)s]")
    parser.add_argument(
        "--pgbouncer",
        type=int,
        default=0,
        metavar="N",
        help="workers connect through a PgBouncer (transaction mode) with N server connections [0: none]",
    )
    args = parser.parse_args(argv)
    try:
        args.worker_counts = [int(w) for w in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers must be whole numbers separated by commas, got {args.workers!r}")
    if min(args.worker_counts) < 1 or args.epochs < 1 or args.duration <= 0 or args.trial_seconds < 0:
        parser.error("--workers, --epochs and --duration must be positive, --trial-seconds not negative")
    return args


def main(argv: list[str] | None = None) -> list[Result]:
    args = parse_args(argv)
    admin = sqlalchemy.create_engine(args.admin_url, isolation_level="AUTOCOMMIT", poolclass=sqlalchemy.NullPool)
    max_conn, reserved, in_use = server_capacity(admin)
    print(f"PostgreSQL max_connections {max_conn} ({reserved} reserved for superusers), {in_use} open now; a worker "
          f"may hold {CONNECTIONS_PER_WORKER} connections to the study's database (storage.POOL_SIZE "
          f"{st.POOL_SIZE} + MAX_OVERFLOW {st.MAX_OVERFLOW}), a real one MLflow's besides", flush=True)  # fmt: skip
    print(f"trials of {args.trial_seconds:g} s in {args.epochs} epochs, heartbeat every {args.heartbeat_interval} s, "
          f"{args.duration:g} s per W, workers in {args.processes} processes\n", flush=True)  # fmt: skip
    results = []
    bouncer = (
        PgBouncer(args.admin_url, pool_size=args.pgbouncer, max_client_conn=10000).start() if args.pgbouncer else None
    )
    if bouncer:
        print(f"through PgBouncer (transaction mode, {args.pgbouncer} server connections)\n", flush=True)
    for workers in args.worker_counts:
        _, _, in_use = server_capacity(admin)
        free = max_conn - reserved - in_use - args.connection_margin
        needed = args.pgbouncer or workers * CONNECTIONS_PER_WORKER
        if needed > free:
            print(f"W={workers:<5} not run: needs up to {needed} connections ({CONNECTIONS_PER_WORKER} per worker; "
                  f"{workers * (CONNECTIONS_PER_WORKER + 2)} with MLflow's), {free} free of max_connections {max_conn} "
                  f"after {in_use} open and a margin of {args.connection_margin}", flush=True)  # fmt: skip
            continue
        results.append(run(admin, workers, args, bouncer))
        print_result(results[-1], saturated=args.trial_seconds == 0)
    if bouncer:
        bouncer.stop()
    admin.dispose()
    return results


if __name__ == "__main__":
    main()
