"""Large studies: how the claim, the sampler, the pruner, the reaper and the views scale with a study's size.

For each N it writes a study of N finished trials to a fresh PostgreSQL database, quickly but as
Optuna writes them: ``--seed-trials`` trials run first through the worker's own path
(``benchmarks/bench_coordination.py``'s simulated worker: claim, ``suggest_params`` with TPE,
``PruningHook`` over ``--epochs`` epochs, ``finish_ok``), then SQL on the storage's engine copies
those rows (trials, params, values, intermediate values, user and system attributes, heartbeats)
N / seed times over, with fresh numbers, params drawn uniformly from the space and values scaled
at random. ``ANALYZE`` follows, as autovacuum would do soon after on a real server. Then it times:

  claim (join)   the first ``Coordinator.claim`` of a worker that just joined (it reads every trial)
  claim          the median of the next ``--repeats`` claims of that worker (each reads what changed)
  lock hold      the median time those claims held the study lock: 1 / hold bounds the claims per
                 second of a study (``bench_coordination.py``)
  suggest        TPE's ``suggest_params`` for those trials, median (``--samplers``: for each, on the
                 same study, as "claim (SPEC)" and "suggest (SPEC)"; the rest is timed with the first)
  pruner         one ``PruningHook`` call where the pruner is asked (median rule), median
  reaper         one ``Coordinator.reap`` pass finding no dead trial, median
  status         ``search status`` as a subprocess (its Python start-up is in every figure)
  trials --top   ``search trials --top 20``, subprocess
  report         ``search report --no-mlflow``, subprocess, and the size of the page
  dashboard      optuna-dashboard as ``search dashboard`` serves it: its first page's data (the
                 study list, then the study's detail with its trials), over HTTP, and its size

and prints each figure for each N and its ratio to the smallest N's.

    python benchmarks/bench_large_study.py --trials 1000,10000
    python benchmarks/bench_large_study.py --trials 1000,10000,100000 --skip report
    python benchmarks/bench_large_study.py --trials 1000,100000 --skip status,trials,report \
        --samplers tpe:window=0,tpe
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import sqlalchemy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_coordination import (  # noqa: E402
    ADMIN_URL,
    METRIC,
    ROOT,
    STUDY,
    SpaceOfTwo,
    TimedCoordinator,
    WorkerStats,
    finish,
    fresh_database,
    make_record,
    run_trial,
)

import storage as st  # noqa: E402
from search.execution._pruning import PruningHook  # noqa: E402
from search.execution._suggest import suggest_params  # noqa: E402

FIGURES = (
    "claim (join)",
    "claim",
    "lock hold",
    "suggest",
    "pruner",
    "reaper",
    "status",
    "trials --top",
    "report",
    "dashboard",
)


def seed(url: str, args: argparse.Namespace) -> None:
    """``--seed-trials`` trials through the worker's path, one after another."""
    record = make_record(args.epochs, heartbeat_interval=10, grace_period=60)
    creator = TimedCoordinator(url, STUDY)
    creator.holds = []
    creator.create_or_resume(record, budget=10**9)
    study = creator.load(worker_ordinal=creator.join())
    trials = st.StudyTrials(creator.storage, st.study_id(study))
    run = SimpleNamespace(trial_seconds=0.0, epochs=args.epochs)
    for _ in range(args.seed_trials):
        trial, _ = creator.claim(study, trials)
        assert trial is not None, "the budget is a billion trials"
        run_trial(creator, study, trials, record, trial, run, WorkerStats(), "bench:seed")  # type: ignore[arg-type]
    creator.storage.engine.dispose()


def grow(url: str, n: int, k: int) -> float:
    """Copy the seed trials' rows up to ``n`` trials; seconds taken."""
    started = time.perf_counter()
    engine = st.create_engine(url)
    with engine.connect() as conn:
        sid = conn.execute(sqlalchemy.text("SELECT study_id FROM studies WHERE study_name = :s"), {"s": STUDY}).scalar()
    st.copy_trials_for_benchmarks(engine, int(sid), n, k)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sqlalchemy.text("ANALYZE"))
    engine.dispose()
    return time.perf_counter() - started


def median_time(call: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        before = time.perf_counter()
        call()
        times.append(time.perf_counter() - before)
    return statistics.median(times)


def time_worker(url: str, args: argparse.Namespace, sampler: str | None = None) -> dict[str, float]:
    """Claim, suggest, prune and reap as a worker that joins the large study (``sampler``: a
    ``--sampler`` spec it suggests with instead of the study's)."""
    coordinator = TimedCoordinator(url, STUDY, schema_checked=True)
    coordinator.holds = []
    record = coordinator.read_record()
    study = coordinator.load(worker_ordinal=coordinator.join())
    if sampler is not None:
        from search.settings import make_sampler

        study.sampler = make_sampler(sampler, seed=None)
    trials = st.StudyTrials(coordinator.storage, st.study_id(study))
    figures: dict[str, list[float]] = {"suggest": [], "pruner": []}
    for i in range(args.repeats + 1):
        before = time.perf_counter()
        trial, _ = coordinator.claim(study, trials)
        figures.setdefault("claim (join)" if i == 0 else "claim", []).append(time.perf_counter() - before)
        assert trial is not None, "the budget is a billion trials"
        before = time.perf_counter()
        params = suggest_params(SpaceOfTwo(), coordinator.storage, trial)  # type: ignore[arg-type]  # a study's suggest
        figures["suggest"].append(time.perf_counter() - before)
        hook = PruningHook(trial, METRIC, trials, patience=0)
        history = []
        for epoch in range(args.epochs):
            value = (params["x"] - 0.3) ** 2 + 1.0 / (epoch + 1)
            history.append({METRIC: value})
            asked, before = hook.asked, time.perf_counter()
            pruned = hook(epoch, {METRIC: value})
            if hook.asked > asked:
                figures["pruner"].append(time.perf_counter() - before)
            if pruned:
                break
        finish(coordinator, study, record, trial, hook, history, time.perf_counter(), time.process_time())
    out = {name: statistics.median(values) for name, values in figures.items() if values}
    out["lock hold"] = statistics.median(coordinator.holds)
    out["reaper"] = median_time(lambda: coordinator.reap(study), args.repeats)
    coordinator.storage.engine.dispose()
    return out


def time_cli(url: str, args: argparse.Namespace, skip: set[str]) -> tuple[dict[str, float], int | None]:
    """Seconds of each view as a subprocess, and the report's size in bytes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEARCH_", "MLFLOW_"))}
    env["PYTHONPATH"] = str(ROOT)
    out: dict[str, float] = {}
    size = None
    with tempfile.TemporaryDirectory() as tmp:
        where = ["--storage", url, "--name", STUDY, "--tracking-uri", f"sqlite:///{tmp}/mlflow.db"]
        page = Path(tmp) / "report.html"
        commands = {"status": ["status"], "trials --top": ["trials", "--top", "20"],
                    "report": ["report", "--no-mlflow", "-o", str(page)]}  # fmt: skip
        for name, command in commands.items():
            if name.split()[0] in skip:
                continue
            before = time.perf_counter()
            try:
                done = subprocess.run([sys.executable, "-m", "search", *command, *where], cwd=tmp, env=env,
                                      capture_output=True, text=True, timeout=args.cli_timeout)  # fmt: skip
            except subprocess.TimeoutExpired:
                out[name] = float("inf")
                continue
            out[name] = time.perf_counter() - before
            if done.returncode != 0:
                print(f"  search {' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
                out[name] = float("nan")
        if page.exists():
            size = page.stat().st_size
    return out, size


def time_dashboard(url: str, timeout: float) -> tuple[float, int]:
    """Seconds and bytes of the dashboard's first page's data, asked as its page asks: the study list,
    then the study's detail (``after=0``: every trial), from a server started on the study."""
    import threading
    import urllib.request

    from search.observation._servers import dashboard_server

    server, page, _ = dashboard_server(url, STUDY, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    base, study_id = page.split("/dashboard/")[0], page.rsplit("/", 1)[1]
    size, before = 0, time.perf_counter()
    try:
        for path in ("/api/studies", f"/api/studies/{study_id}?after=0"):
            with urllib.request.urlopen(base + path, timeout=timeout) as reply:
                size += len(reply.read())
        return time.perf_counter() - before, size
    except TimeoutError:
        return float("inf"), size
    finally:
        server.shutdown()
        server.server_close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", default="1000,10000", help="study sizes N, comma-separated [1000,10000]")
    parser.add_argument("--seed-trials", type=int, default=50, help="trials run through the worker's path [50]")
    parser.add_argument("--epochs", type=int, default=8, help="epochs (intermediate values) per trial [8]")
    parser.add_argument("--repeats", type=int, default=5, help="claims, suggestions and reaper passes timed [5]")
    parser.add_argument(
        "--samplers", default="", help="--sampler specs whose suggestions are timed, comma-separated [the study's: tpe]"
    )
    parser.add_argument("--skip", default="", help="views not to time: status,trials,report,dashboard")
    parser.add_argument("--cli-timeout", type=float, default=600.0, help="seconds a view may take [600]")
    parser.add_argument("--admin-url", default=ADMIN_URL, help="a database to create the benchmark's in [%(default)s]")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(n) for n in args.trials.split(",")]
    except ValueError:
        parser.error(f"--trials must be whole numbers separated by commas, got {args.trials!r}")
    if min(args.sizes) < args.seed_trials or args.seed_trials < 1:
        parser.error(f"--trials must each be at least --seed-trials ({args.seed_trials})")
    return args


def main(argv: list[str] | None = None) -> dict[int, dict[str, float]]:
    args = parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    admin = sqlalchemy.create_engine(args.admin_url, isolation_level="AUTOCOMMIT", poolclass=sqlalchemy.NullPool)
    results: dict[int, dict[str, float]] = {}
    for n in args.sizes:
        with fresh_database(admin) as (_, url):
            seed(url, args)
            took = grow(url, n, args.seed_trials)
            samplers = [spec for spec in args.samplers.split(",") if spec] or [None]
            figures = time_worker(url, args, samplers[0])
            if len(samplers) > 1:
                for name in ("claim", "suggest"):
                    figures[f"{name} ({samplers[0]})"] = figures.pop(name)
                for spec in samplers[1:]:
                    more = time_worker(url, args, spec)
                    figures.update({f"{name} ({spec})": more[name] for name in ("claim", "suggest")})
            views, size = time_cli(url, args, skip)
            results[n] = {**figures, **views}
            report = f", report {size / 1e6:.1f} MB" if size else ""
            if "dashboard" not in skip:
                results[n]["dashboard"], served = time_dashboard(url, args.cli_timeout)
                report += f", dashboard's first page {served / 1e6:.1f} MB"
            print(f"N={n}: written in {took:.1f} s{report}", flush=True)
            print("  " + "  ".join(f"{k} {1000 * v:.1f} ms" for k, v in results[n].items()), flush=True)
    admin.dispose()
    base = args.sizes[0]
    print(f"\n{'':<14}" + "".join(f"{f'N={n}':>12}" for n in args.sizes) + "".join(
        f"{f'x{n // base}':>10}" for n in args.sizes[1:]))  # fmt: skip
    for name in [f for f in FIGURES if f in results[base]] + [f for f in results[base] if f not in FIGURES]:
        row = "".join(f"{1000 * results[n].get(name, float('nan')):>10.1f}ms" for n in args.sizes)
        ratios = "".join(f"{results[n].get(name, float('nan')) / results[base][name]:>10.1f}" for n in args.sizes[1:])
        print(f"{name:<14}{row}{ratios}", flush=True)
    return results


if __name__ == "__main__":
    main()
