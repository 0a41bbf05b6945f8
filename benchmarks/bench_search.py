"""Search quality per compute: strategies side by side on the same problems and seeds, against baselines.

Two modes, one report (and a third reading of the simulator):

* ``service``: each strategy runs through the real ``search start`` and its workers (the claim
  path, the sampler and the pruner exactly as in production) on a real study (resmlp on digits or
  synthetic data, resnet, tinylm) or on the LCBench surrogate (``lcbench:<task>``, a study whose
  epochs sleep the surrogate's simulated time). The sequential script baseline (plain Optuna, TPE +
  MedianPruner, one process: what a user would otherwise write) runs the same study's code.
* ``simulate``: W asynchronous workers over LCBench surrogate curves in simulated time
  (``search_sim.py``), with the service's own sampler and pruner objects: hundreds of searches in
  minutes, to choose defaults, with 1, 8 and 32 workers. Adds the one-epoch top-K baseline and
  DEHB (``dehb_baseline.py``, when the ``dehb`` package is installed), and reports mean rank and
  normalized regret at 20, 50 and 126 full-training equivalents. A freeze-thaw pause costs
  ``--pause-cost`` epochs (0.05) of the pausing worker's time, a resumption ``--resume-cost`` (0.1).
* ``speedup``: the same simulator, read as issue 48's wall-clock target (``speedup.py``): per task
  and seed, how much sooner W workers reach the one-worker script's final best than the script did.
* ``kfold``: issue 49's k-fold row (``kfold.py``): the real ``search start`` with ``folds=K`` against
  one validation split at an equal epoch budget, paired per seed on the champion's test metrics.

Printed per problem and worker count: the final best value at an equal trial budget (median and
range over seeds, and its ratio to the script's), and the epochs and wall time each strategy
needed to reach the script's final best value (median over seeds, ratio to the script's own).
``--out`` gets the anytime curves (best so far against epochs and against time) as a plotly page,
the rank correlation of each epoch's values with the final values, and the raw traces as JSON.
``--first-seed F`` runs seeds F to F+SEEDS-1 (each drawn as in a run from seed 0), to add seeds to a record.
``service --epoch-budget-from script`` gives the service's strategies the script's epochs of the same seed
(``search start --epoch-budget``, no ``--trials``): a user who gives the search the script's compute.

  python benchmarks/bench_search.py simulate --tasks 3945,34539,146212,189906 --workers 1,8,32 --seeds 5
  python benchmarks/bench_search.py speedup --tasks 167168,168868,189909 --workers 8,32 --seeds 5 --jobs 2
  python benchmarks/bench_search.py kfold --problem synthetic --rows 400 --folds 3 --trials 6 --seeds 5
  python benchmarks/bench_search.py service --problem resmlp-digits --workers 2 --trials 40 --seeds 5
  python benchmarks/bench_search.py service --problem tinylm-small --workers 2 --trials 40 --seeds 5 --first-seed 5
  python benchmarks/bench_search.py service --problem lcbench:3945 --workers 8 --trials 200 --seeds 5 \\
      --storage-admin postgresql+psycopg2://root@127.0.0.1:5432/test

The surrogate needs onnxruntime: ``pip install -r benchmarks/requirements.txt`` (not a product dependency).
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
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# The checkout first, so `studies` is the package and not benchmarks/studies; then search_sim and lcbench.
sys.path[:0] = [str(ROOT), str(HERE)]

import kfold  # noqa: E402
import speedup  # noqa: E402
from dehb_baseline import dehb_search  # noqa: E402
from equal_epochs import sign_test  # noqa: E402
from search_sim import (  # noqa: E402
    Curve,
    Event,
    Strategy,
    Trace,
    epoch_rank_correlation,
    simulate,
    top_k_after_one_epoch,
)

FTE_BUDGETS = (20, 50, 126)
"""Full-training equivalents (epochs / max epochs) at which the surrogate comparison is read."""

PROBLEMS: dict[str, tuple[str, dict[str, Any]]] = {
    "resmlp-digits": ("resmlp", {"data": "digits", "search_epochs": 20}),
    "resmlp-synthetic": ("resmlp", {"data": "synthetic", "rows": 3000, "search_epochs": 20}),
    "resnet-digits": ("resnet", {"search_epochs": 6, "stages": 2}),
    "tinylm-small": ("tinylm", {"max_chars": 20000, "search_epochs": 4, "context": 32}),
}


def strategies() -> dict[str, Strategy]:
    """The default, every sampler and every pruner the CLI offers, the previous default and the baselines."""
    from search.settings import PRUNERS, SAMPLERS, SearchSettings

    default = SearchSettings()
    found = {"default": Strategy("default", default.sampler, default.pruner, patience=default.patience)}
    for sampler in SAMPLERS:
        found[f"{sampler}+{default.pruner}"] = spec_strategy(f"{sampler}+{default.pruner}")
    for pruner in PRUNERS:
        found[f"{default.sampler}+{pruner}"] = spec_strategy(f"{default.sampler}+{pruner}")
    found["old-default"] = Strategy("old-default", "tpe:multivariate=true,liar=false", "hyperband")  # before 409e312
    found["random"] = Strategy("random", "random", "none")
    found["script"] = Strategy("script", build=_script_study, sequential=True)
    found["script-eager"] = Strategy("script-eager", build=_eager_script_study, sequential=True)
    # Plain Optuna's own parallel mode: the script run by W processes on one storage (Optuna 5's TPE
    # lies about running trials by default: constant_liar=True).
    found["optuna-parallel"] = Strategy("optuna-parallel", build=_script_study)
    return found


def spec_strategy(name: str) -> Strategy:
    """``SAMPLER+PRUNER[+patience=P]``: ``search start`` with those flags and every other at its default."""
    from search.settings import SearchSettings, parse_patience

    sampler, pruner, *rest = name.split("+")
    patience = SearchSettings().patience
    thaw = spare = 0.0
    for extra in rest:
        key, _, value = extra.partition("=")
        if key == "patience":
            patience = parse_patience(value)
        elif key == "thaw":
            thaw = float(value)
        elif key == "spare":
            spare = float(value)
        else:
            raise SystemExit(
                f"bad strategy {name!r}: expected SAMPLER+PRUNER[+patience=EPOCHS|auto|off][+thaw=F][+spare=F]"
            )
    return Strategy(name, sampler, pruner, patience=patience, thaw=thaw, spare=spare)


def _script_study(problem: Any, seed: int, storage: Any = None, eager: bool = False) -> Any:
    """What a user copies: plain Optuna, ``TPESampler(seed=s)`` and ``MedianPruner(n_startup_trials=5,
    n_warmup_steps=3)`` (Optuna's own examples and most tutorials); ``eager``: ``MedianPruner()``,
    which prunes from the first epoch (the benchmark's baseline before 2026-11-28, now ``script-eager``)."""
    import optuna

    pruner = optuna.pruners.MedianPruner() if eager else optuna.pruners.MedianPruner(n_startup_trials=5,
                                                                                    n_warmup_steps=3)  # fmt: skip
    return optuna.create_study(study_name=problem.name, sampler=optuna.samplers.TPESampler(seed=seed),
                               pruner=pruner, storage=storage, load_if_exists=storage is not None)  # fmt: skip


def _eager_script_study(problem: Any, seed: int) -> Any:
    return _script_study(problem, seed, eager=True)


# -- the surrogate as a simulated problem --------------------------------------------------------


class SurrogateProblem:
    epochs = 52

    def __init__(self, task: str) -> None:
        from lcbench import LCBench

        self.task = task
        self.name = f"lcbench-{task}"
        self._bench = LCBench()

    def space(self) -> dict[str, Any]:
        from lcbench import SPACE
        from optuna.distributions import FloatDistribution, IntDistribution

        return {name: IntDistribution(int(p.low), int(p.high), log=p.log) if p.integer
                else FloatDistribution(p.low, p.high, log=p.log) for name, p in SPACE.items()}  # fmt: skip

    def curve(self, params: dict[str, Any]) -> Curve:
        rows = self._bench.query(self.task, params, range(1, self.epochs + 1))
        times = [r["time"] for r in rows]
        seconds = [times[0], *(max(1e-6, b - a) for a, b in zip(times, times[1:], strict=False))]
        return Curve([r["val_cross_entropy"] for r in rows], seconds)


def run_simulated(args: argparse.Namespace) -> list[Trace]:
    chosen = _chosen(args)
    traces = []
    with_dehb = args.dehb and _dehb_installed()
    for task in args.tasks.split(","):
        problem = SurrogateProblem(task)
        for workers in _ints(args.workers):
            for seed in _seeds(args):
                for name, strategy in chosen.items():
                    if strategy.sequential and workers != _ints(args.workers)[0]:
                        # The script is one process whatever the worker count: run it once, reuse it.
                        twin = next(t for t in traces if t.strategy == name and t.problem == problem.name
                                    and t.seed == seed)  # fmt: skip
                        traces.append(Trace(name, problem.name, workers, seed, twin.events, twin.curves))
                        continue
                    budget = max(FTE_BUDGETS) * problem.epochs
                    trace = simulate(problem, strategy, workers, seed, trials=args.trials, epochs_budget=budget,
                                     pause_cost=args.pause_cost, resume_cost=args.resume_cost)  # fmt: skip
                    trace.workers = workers
                    traces.append(trace)
                trace = top_k_after_one_epoch(problem, workers, seed, trials=args.trials,
                                              epochs_budget=max(FTE_BUDGETS) * problem.epochs)  # fmt: skip
                traces.append(trace)
                if with_dehb:
                    traces.append(dehb_search(problem, workers, seed, epochs_budget=max(FTE_BUDGETS) * problem.epochs))
                print(f"  {problem.name} W={workers} seed {seed} done", file=sys.stderr, flush=True)
    return traces


def _seeds(args: argparse.Namespace) -> range:
    return range(args.first_seed, args.first_seed + args.seeds)


def _dehb_installed() -> bool:
    try:
        import dehb  # noqa: F401
    except ImportError as exc:  # dehb itself, or one of the packages it imports (see the requirements)
        print(f"no DEHB baseline in this run: {exc} (see benchmarks/requirements-dehb.txt)", file=sys.stderr)
        return False
    return True


# -- the real service ----------------------------------------------------------------------------


def _problem_study(problem: str) -> tuple[str, dict[str, Any]]:
    if problem.startswith("lcbench:"):
        return str(HERE / "studies" / "lcbench_study.py"), {"task": problem.split(":", 1)[1]}
    if problem not in PROBLEMS:
        raise SystemExit(f"unknown problem {problem!r}; choose one of {', '.join(PROBLEMS)} or lcbench:<task>")
    return PROBLEMS[problem]


def run_service(args: argparse.Namespace) -> list[Trace]:
    study, options = _problem_study(args.problem)
    options = {**options, **dict(o.split("=", 1) for o in args.study_option)}
    traces = []
    chosen = _chosen(args)
    if args.epoch_budget_from and next(iter(chosen), None) != args.epoch_budget_from:
        raise SystemExit(f"--epoch-budget-from {args.epoch_budget_from}: list it first in --strategies")
    for workers in _ints(args.workers):
        for seed in _seeds(args):
            epochs = None  # the reference's, this seed: the budget of the strategies after it
            for name, strategy in chosen.items():
                started = time.time()
                if strategy.build is not None:  # plain Optuna: one process, or W on one storage
                    runs = 1 if strategy.sequential else workers
                    trials = _run_script(study, options, seed, args.trials, runs, eager=name == "script-eager")
                    if name == args.epoch_budget_from:
                        epochs = sum(t["epochs"] for t in trials)
                else:
                    trials = _run_search(study, options, strategy, workers, seed, args, epochs)
                trace = _trace(name, args.problem, workers, seed, trials, started)
                traces.append(trace)
                print(f"  {name} W={workers} seed {seed}: best {trace.best_at():.4g} "
                      f"in {time.time() - started:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
    return traces


def _run_search(study: str, options: dict[str, Any], strategy: Strategy, workers: int, seed: int,
                args: argparse.Namespace, epoch_budget: int | None = None) -> list[dict[str, Any]]:  # fmt: skip
    import optuna

    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp, _database(args.storage_admin, workers) as url:
        env = {**os.environ, "SEARCH_PROJECT_DIR": tmp, "PYTHONUNBUFFERED": "1"}
        if url:
            env["SEARCH_STORAGE"] = url
        budget = ["--trials", str(args.trials)] if epoch_budget is None else ["--epoch-budget", str(epoch_budget)]
        cmd = [sys.executable, "-m", "search", "start", "--study", study, "--name", "bench", *budget,
               "--workers", str(workers), "--sampler", strategy.sampler, "--pruner",
               strategy.pruner, "--patience", strategy.patience, "--seed", str(seed), "--no-retrain", "--quiet",
               *(a for k, v in options.items() for a in ("--study-option", f"{k}={v}"))]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"search start failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        storage = url or f"sqlite:///{tmp}/optuna.db"
        loaded = optuna.load_study(study_name="bench", storage=storage)
        return [_record(t) for t in loaded.get_trials(deepcopy=False)]


class _database:
    """A fresh PostgreSQL database for runs with several workers (SQLite's one writer would bottleneck them)."""

    def __init__(self, admin_url: str | None, workers: int) -> None:
        self.admin_url = admin_url if workers > 2 else None
        self.name = f"hpsearch_bench_{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> str | None:
        if not self.admin_url:
            return None
        import sqlalchemy

        self.engine = sqlalchemy.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        with self.engine.connect() as conn:
            conn.execute(sqlalchemy.text(f'CREATE DATABASE "{self.name}"'))
        return self.admin_url.rsplit("/", 1)[0] + f"/{self.name}"

    def __exit__(self, *exc: object) -> None:
        if not self.admin_url:
            return
        import sqlalchemy

        with self.engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname=:n"),
                         {"n": self.name})  # fmt: skip
            conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{self.name}"'))
        self.engine.dispose()


def _run_script(study: str, options: dict[str, Any], seed: int, trials: int, processes: int = 1,
                eager: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """The script in processes of its own (their start-up counts, as the service's does): one, or
    ``processes`` sharing one journal file (Optuna's parallel mode; each with its own seed, as
    the service's workers have, so that they do not propose the same first trials)."""
    with tempfile.TemporaryDirectory(prefix="bench-script-") as tmp:
        journal = Path(tmp) / "journal.log"
        outs = [Path(tmp) / f"trials-{index}.json" for index in range(processes)]
        flags = ["--study", study, "--options", json.dumps(options), "--trials", str(trials), "--storage", str(journal)]
        # Each process gets its share of the cores, as the service's workers do: W processes with
        # torch's default threads each oversubscribe the machine and crawl.
        from search.execution._machine import worker_threads

        env = {**os.environ, "OMP_NUM_THREADS": worker_threads(processes, [])}
        procs = [subprocess.Popen([sys.executable, __file__, "_script", *flags, "--seed", str(seed + 7919 * index),
                                   "--json", str(out), *(["--eager"] if eager else [])], cwd=ROOT, env=env)
                 for index, out in enumerate(outs)]  # fmt: skip
        if any(proc.wait() != 0 for proc in procs):
            raise SystemExit("a script process failed")
        # Each wrote the study's finished trials as it ended: the last to end saw them all.
        return max((list(json.loads(out.read_text())) for out in outs), key=len)


def script_main(args: argparse.Namespace) -> None:
    """The baseline a user would write: plain Optuna around the same study's model, data and trainer."""
    import optuna
    import torch

    import studies
    import trainer

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study_def = studies.get_study(args.study, **json.loads(args.options))
    data = study_def.load_data()

    def objective(trial: optuna.Trial) -> float:
        params = study_def.suggest(trial)
        model = study_def.build_model(params, data)
        config = study_def.train_config(params, study_def.search_fidelity)

        def report(epoch: int, metrics: Any) -> bool:
            trial.report(float(metrics[study_def.metric]), epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()
            return False

        with tempfile.TemporaryDirectory() as tmp:
            infra = studies.study_infra(study_def, params, study_def.search_fidelity).replace(checkpoint_dir=Path(tmp))
            result = trainer.fit(model, data.train, data.val, data.task, config, infra=infra, hooks=[report])
        return min(float(h[study_def.metric]) for h in result.history)

    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.study import MaxTrialsCallback

    storage = JournalStorage(JournalFileBackend(args.storage))
    study = _script_study(type("P", (), {"name": study_def.name})(), args.seed, storage, eager=args.eager)
    # Every process stops once the study holds the budget (each asks for it all: the others' count)
    study.optimize(objective, n_trials=args.trials, catch=(Exception,),
                   callbacks=[MaxTrialsCallback(args.trials, states=None)])  # fmt: skip
    done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    threads = torch.get_num_threads()  # each record says what its process trained with
    records = [{**_record(t), "threads": threads} for t in sorted(done, key=lambda t: t.number)[: args.trials]]
    Path(args.json).write_text(json.dumps(records))


def _record(trial: Any) -> dict[str, Any]:
    curve = [v for _, v in sorted(trial.intermediate_values.items())]
    return {"number": trial.number, "state": trial.state.name, "value": trial.value, "epochs": len(curve),
            "curve": curve, "start": trial.datetime_start.timestamp() if trial.datetime_start else None,
            "end": trial.datetime_complete.timestamp() if trial.datetime_complete else None}  # fmt: skip


def _trace(name: str, problem: str, workers: int, seed: int, trials: list[dict[str, Any]], started: float) -> Trace:
    """Finished trials in the order they ended: wall time since the command started, epochs so far, best so far."""
    trace = Trace(name, problem, workers, seed)
    used, best = 0, math.inf
    ended = sorted((t for t in trials if t["end"] is not None), key=lambda t: t["end"])
    for done, t in enumerate(ended, start=1):
        used += t["epochs"]
        if t["state"] == "COMPLETE" and t["value"] is not None:
            best = min(best, t["value"])
            trace.curves.append(t["curve"])
        trace.events.append(Event(t["end"] - started, used, done, best))
    return trace


# -- the report ----------------------------------------------------------------------------------


def report(traces: list[Trace], trials: int, baseline: str = "script", surrogate: bool = False) -> str:
    lines = []
    groups: dict[tuple[str, int], list[Trace]] = defaultdict(list)
    for trace in traces:
        groups[(trace.problem, trace.workers)].append(trace)
    for (problem, workers), group in sorted(groups.items()):
        by: dict[str, list[Trace]] = defaultdict(list)
        for trace in group:
            by[trace.strategy].append(trace)
        base = {t.seed: t for t in by.get(baseline, [])}
        base_best = statistics.median(t.best_at(trials=trials) for t in base.values()) if base else math.nan
        base_epochs = statistics.median(t.events[-1].epochs for t in base.values()) if base else math.nan
        base_secs = statistics.median(t.events[-1].seconds for t in base.values()) if base else math.nan
        lines.append(f"\n{problem}, {workers} worker(s), {trials} trials, median over {len(base) or '?'} seeds"
                     f" (ratio: to the {baseline}'s; reach: first best <= the {baseline}'s final)")  # fmt: skip
        lines.append(f"{'strategy':24} {'best @ trials':>13} {'range':>19} {'ratio':>6} {'epochs to reach':>16} "
                     f"{'ratio':>6} {'time to reach':>14} {'ratio':>6}")  # fmt: skip
        for name, runs in sorted(by.items(), key=lambda kv: statistics.median(t.best_at(trials=trials) for t in kv[1])):
            bests = [t.best_at(trials=trials) for t in runs]
            reach = [t.cost_to_reach(base[t.seed].best_at(trials=trials)) if t.seed in base else (math.inf, math.inf)
                     for t in runs]  # fmt: skip
            epochs, secs = statistics.median(r[0] for r in reach), statistics.median(r[1] for r in reach)
            lines.append(f"{name:24} {statistics.median(bests):>13.4g} {min(bests):>9.4g}-{max(bests):<9.4g} "
                         f"{statistics.median(bests) / base_best:>6.3f} {epochs:>16.0f} {epochs / base_epochs:>6.2f} "
                         f"{secs:>13.1f}s {secs / base_secs:>6.2f}")  # fmt: skip
    if surrogate:
        lines.append(regret_table(traces))
        lines.append(workers_table(traces))
        lines.append(paired_table(traces))
    lines.append(paired_table(traces, at_trials=trials))
    return "\n".join(lines)


def paired_table(traces: list[Trace], reference: str = "default", at_trials: int | None = None,
                 epochs_per_fte: int = 52) -> str:  # fmt: skip
    """Each strategy against ``reference`` pair by pair: the same problem, worker count and seed, at
    each FTE budget (or at ``at_trials`` trials). Wins and losses of the strategy (lower best value
    wins), and the sign test's two-sided p: how often a split this uneven comes from chance alone.
    A median or a mean rank over a few seeds moves with the random stream; this says how much."""
    if not any(t.strategy == reference for t in traces):
        return ""
    budgets: list[tuple[str, dict[str, float]]] = (
        [(f"@{at_trials} trials", {"trials": at_trials})] if at_trials is not None
        else [(f"@{b} FTE", {"epochs": b * epochs_per_fte}) for b in FTE_BUDGETS]
    )  # fmt: skip
    ref = {(t.problem, t.workers, t.seed): t for t in traces if t.strategy == reference}
    lines = [f"\npaired with {reference} (same problem, workers and seed): wins-losses of each strategy, "
             f"and the sign test's p (below 0.05: unlikely to be chance)",
             f"  {'strategy':22} {'workers':>7}" + "".join(f"{label:>18}" for label, _ in budgets)]  # fmt: skip
    for name in sorted({t.strategy for t in traces} - {reference}):
        for workers in sorted({t.workers for t in traces if t.strategy == name}):
            runs = [t for t in traces if t.strategy == name and t.workers == workers]
            pairs = [(t, ref[(t.problem, t.workers, t.seed)]) for t in runs if (t.problem, t.workers, t.seed) in ref]
            if not pairs:
                continue
            cells = []
            for _, at in budgets:
                mine = [(a.best_at(**at), b.best_at(**at)) for a, b in pairs]
                wins, losses = sum(x < y for x, y in mine), sum(x > y for x, y in mine)
                cells.append(f"{wins}-{losses} (p {sign_test(wins, losses):.2f})")
            lines.append(f"  {name:22} {workers:>7}" + "".join(f"{c:>18}" for c in cells))
    return "\n".join(lines)


def workers_table(traces: list[Trace], epochs_per_fte: int = 52) -> str:
    """Per strategy: does it lose quality as workers grow? Best value after the same training epochs,
    each worker count against the fewest one run (median over seeds per task, then the geometric
    mean of the ratios over tasks; below 1 is better)."""
    counts = sorted({t.workers for t in traces})
    if len(counts) < 2:
        return ""
    lines = [
        f"\nworkers: best value at equal training epochs, ratio to {counts[0]} worker(s) "
        f"(geometric mean over tasks of the median over seeds; < 1 is better)",
        f"{'strategy':24} {'workers':>7}"
        + "".join(f"{'@' + str(b) + ' FTE':>10}" for b in FTE_BUDGETS)
        + f"{'first complete (FTE)':>24}",
    ]

    def first_complete(runs: list[Trace], workers: int) -> float:
        """FTE spent when the first trial completed (median over tasks and seeds): before it, nothing
        has a best value. While one trial trains its epochs, W - 1 other workers train theirs: with
        equal epoch times the first trial completes after about W FTE, sooner where some
        configurations train faster (LCBench's epoch times differ by configuration)."""
        firsts = [next((e.epochs for e in t.events if math.isfinite(e.best)), math.inf) for t in runs
                  if t.workers == workers]  # fmt: skip
        return statistics.median(firsts) / epochs_per_fte

    def median_best(runs: list[Trace], problem: str, workers: int, epochs: float) -> float:
        here = [t for t in runs if t.problem == problem and t.workers == workers]
        return statistics.median(t.best_at(epochs=epochs) for t in here)

    for name in sorted({t.strategy for t in traces} - {"script"}):  # the script is one worker whatever the count
        runs = [t for t in traces if t.strategy == name]
        problems = sorted({t.problem for t in runs})
        for workers in counts[1:]:
            cells = []
            for budget in FTE_BUDGETS:
                pairs = [(median_best(runs, p, counts[0], budget * epochs_per_fte),
                          median_best(runs, p, workers, budget * epochs_per_fte)) for p in problems]  # fmt: skip
                # inf: no trial complete yet at that budget (the ratio is then inf, or nan for both).
                logs = [math.log(here / base) if math.isfinite(base) else math.nan for base, here in pairs]
                cells.append(math.exp(statistics.mean(logs)) if logs else math.nan)
            firsts = f"{first_complete(runs, counts[0]):.1f} -> {first_complete(runs, workers):.1f}"
            lines.append(f"{name:24} {workers:>7}" + "".join(f"{c:>10.3f}" for c in cells) + f"{firsts:>24}")
    return "\n".join(lines)


def regret_table(traces: list[Trace], epochs_per_fte: int = 52) -> str:
    """Mean rank and normalized regret per strategy and worker count at each FTE budget (YAHPO's reading)."""
    lines = [f"\nsurrogate: mean rank (1 = best) and mean normalized regret over tasks and seeds, "
             f"at {', '.join(map(str, FTE_BUDGETS))} full-training equivalents"]  # fmt: skip
    for workers in sorted({t.workers for t in traces}):
        cells: dict[str, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
        runs = [t for t in traces if t.workers == workers]
        for budget in FTE_BUDGETS:
            for problem in sorted({t.problem for t in runs}):
                values = {(t.strategy, t.seed): t.best_at(epochs=budget * epochs_per_fte) for t in runs
                          if t.problem == problem}  # fmt: skip
                finite = [v for v in values.values() if math.isfinite(v)]
                lo, hi = min(finite), max(finite)
                for seed in sorted({s for _, s in values}):
                    row = {name: v for (name, s), v in values.items() if s == seed}
                    order = sorted(row, key=lambda n: row[n])
                    for name, value in row.items():
                        regret = (value - lo) / (hi - lo) if math.isfinite(value) and hi > lo else 1.0
                        cells[name][budget].append((order.index(name) + 1, regret))
        lines.append(f"\n{workers} worker(s)   " + "".join(f"{'rank@' + str(b):>9}{'regret@' + str(b):>11}"
                                                          for b in FTE_BUDGETS))  # fmt: skip
        for name in sorted(cells, key=lambda n: statistics.mean(r for r, _ in cells[n][FTE_BUDGETS[-1]])):
            row = "".join(f"{statistics.mean(r for r, _ in cells[name][b]):>9.2f}"
                          f"{statistics.mean(g for _, g in cells[name][b]):>11.3f}" for b in FTE_BUDGETS)  # fmt: skip
            lines.append(f"  {name:22}{row}")
    return "\n".join(lines)


def write_outputs(traces: list[Trace], out: Path, text: str) -> None:
    """The table, the raw traces, rank correlations per epoch and the anytime curves as one plotly page."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    out.mkdir(parents=True, exist_ok=True)
    (out / "table.txt").write_text(text + "\n")
    rows = [{**{k: v for k, v in vars(t).items() if k != "events"}, "events": [vars(e) for e in t.events]}
            for t in traces]  # fmt: skip
    (out / "traces.json").write_text(json.dumps(rows))
    correlations = {}
    for problem in sorted({t.problem for t in traces}):
        curves = [c for t in traces if t.problem == problem for c in t.curves]
        if curves:
            correlations[problem] = [None if math.isnan(r) else round(r, 3) for r in epoch_rank_correlation(curves)]
    (out / "rank_correlation.json").write_text(json.dumps(correlations, indent=1))
    groups = sorted({(t.problem, t.workers) for t in traces})
    fig = make_subplots(rows=len(groups), cols=2, subplot_titles=[f"{p}, W={w}: {x}" for p, w in groups
                                                                   for x in ("vs epochs", "vs time (s)")])  # fmt: skip
    for row, (problem, workers) in enumerate(groups, start=1):
        for index, name in enumerate(sorted({t.strategy for t in traces})):
            runs = [t for t in traces if t.problem == problem and t.workers == workers and t.strategy == name]
            if not runs:
                continue
            for col, axis in ((1, "epochs"), (2, "seconds")):
                top = max(getattr(t.events[-1], axis) for t in runs)
                xs = [top * i / 100 for i in range(1, 101)]
                ys = [statistics.median(t.best_at(**{axis: x}) for t in runs) for x in xs]
                fig.add_trace(go.Scatter(x=xs, y=ys, name=name, legendgroup=name, showlegend=row == 1 and col == 1,
                                         line={"color": _COLORS[index % len(_COLORS)]}), row=row, col=col)  # fmt: skip
    fig.update_layout(height=360 * len(groups), template="plotly_white", title="best so far (median over seeds)")
    fig.write_html(out / "anytime.html", include_plotlyjs=True)


_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#000000", "#aec7e8", "#ffbb78"]  # fmt: skip


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def experiments() -> dict[str, Strategy]:
    """Named variants of the default that the measured records in docs/experiments/ ran (named, never
    part of the default "all"). Rejected experiments left the tree: see docs/experiments/README.md."""
    from search.settings import SearchSettings

    default = SearchSettings()
    return {"patience5": Strategy("patience5", default.sampler, default.pruner, patience="5"),
            "patience10": Strategy("patience10", default.sampler, default.pruner, patience="10")}  # fmt: skip


def _chosen(args: argparse.Namespace) -> dict[str, Strategy]:
    table = strategies()
    if args.strategies:
        table.update(experiments())
    names: list[str] = []
    for piece in args.strategies.split(",") if args.strategies else list(table):
        if names and "+" in names[-1] and "=" in piece and "+" not in piece and piece not in table:
            names[-1] += "," + piece  # an option of the previous spec: tpe+median:warmup=auto,conf=0.8
        else:
            names.append(piece)
    unknown = [n for n in names if n not in table and "+" not in n]
    if unknown:
        raise SystemExit(f"unknown strategies {unknown}; known: {', '.join(table)} or SAMPLER+PRUNER specs")
    return {n: table.get(n) or spec_strategy(n) for n in names}


def _check_strategies(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """An unknown name or a bad spec fails here in one line, before any simulation."""
    from search.settings import make_pruner, make_sampler, resolve_sampler

    try:
        chosen = _chosen(args)
    except SystemExit as exc:
        parser.error(str(exc))
    for name, strategy in chosen.items():
        if strategy.build is None:
            try:
                make_sampler(resolve_sampler(strategy.sampler, 1)[0], 0)
                make_pruner(strategy.pruner, SurrogateProblem.epochs)
            except Exception as exc:  # noqa: BLE001 - whatever the spec parser says, in one line
                parser.error(f"bad strategy {name!r}: {exc}")


def speedup_main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``speedup``: the time-to-target table of issue 48 (``benchmarks/speedup.py``)."""
    try:
        workers = _ints(args.workers)
    except ValueError:
        parser.error(f"--workers must be comma-separated integers, got {args.workers!r}")
    if min(workers) < 1 or args.seeds < 1 or args.trials < 1 or args.jobs < 1 or args.strategy_trials < 0:
        parser.error("--workers, --seeds, --trials and --jobs must be at least 1, --strategy-trials at least 0")
    if not (0 <= args.pause_cost < math.inf and 0 <= args.resume_cost < math.inf):
        parser.error("--pause-cost and --resume-cost must be epochs >= 0")
    if args.read:
        traces = speedup.read(args.read)
    else:
        _check_strategies(parser, args)
        traces = speedup.run(args)
    text = speedup.speedup_table(speedup.reaches(traces), args.factor)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.txt").write_text(text + "\n")
        rows = [{**{k: v for k, v in vars(t).items() if k != "events"}, "events": [vars(e) for e in t.events]}
                for t in traces]  # fmt: skip
        (args.out / "traces.json").write_text(json.dumps(rows))
        print(f"\nwrote {args.out}/table.txt, traces.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    sim = sub.add_parser("simulate", help="W simulated workers over the LCBench surrogate")
    sim.add_argument("--tasks", default="3945,34539,146212,189906")
    sim.add_argument("--workers", default="1,8,32")
    sim.add_argument("--no-dehb", dest="dehb", action="store_false",
                     help="leave out the DEHB baseline (run when the dehb package is installed)")  # fmt: skip
    sim.add_argument("--pause-cost", type=float, default=0.05,
                     help="epochs (of that trial) a worker spends pausing a trial (freeze-thaw) [0.05]")  # fmt: skip
    sim.add_argument("--resume-cost", type=float, default=0.1,
                     help="epochs (of that trial) a resumption costs before its next epoch [0.1]")  # fmt: skip
    fast = sub.add_parser("speedup", help="simulated wall-clock speed-up of W workers over the one-worker script",
                          description=speedup.__doc__,
                          formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    speedup.add_arguments(fast)
    fast.add_argument("--out", type=Path, help="folder for table.txt and traces.json")
    fold = sub.add_parser("kfold", help="folds=K against one split at equal epochs, on the champion's test split",
                          description=kfold.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    kfold.add_arguments(fold)
    service = sub.add_parser("service", help="the real `search start` on a study")
    service.add_argument("--problem", default="resmlp-digits")
    service.add_argument("--workers", default="2")
    service.add_argument("--study-option", action="append", default=[], metavar="KEY=VALUE")
    service.add_argument("--epoch-budget-from", choices=["script"],
                         help="run the service's strategies with --epoch-budget set to the epochs the script "
                              "(listed first in --strategies) trained on the same seed, and no --trials")  # fmt: skip
    service.add_argument("--storage-admin", default=os.environ.get("BENCH_STORAGE_ADMIN"),
                         help="PostgreSQL URL to create a database per run in (for more than 2 workers)")  # fmt: skip
    for p in (sim, service):
        p.add_argument("--seeds", type=int, default=5)
        p.add_argument("--first-seed", type=int, default=0, help="seeds run FIRST..FIRST+SEEDS-1 [0]")
        p.add_argument("--trials", type=int, default=200)
        p.add_argument(
            "--strategies", default="", help="comma-separated names or SAMPLER+PRUNER[+patience=P] specs [all]"
        )
        p.add_argument("--out", type=Path, help="folder for anytime.html, traces.json, rank_correlation.json")
    script = sub.add_parser("_script")  # the sequential baseline, in its own process
    for flag in ("--study", "--options", "--json"):
        script.add_argument(flag, required=True)
    script.add_argument("--seed", type=int, required=True)
    script.add_argument("--trials", type=int, required=True)
    script.add_argument("--storage", required=True, help="journal file the script's processes share")
    script.add_argument("--eager", action="store_true", help="MedianPruner() (prunes from epoch 1)")
    args = parser.parse_args()
    if args.mode == "_script":
        script_main(args)
        return
    if args.mode == "speedup":
        speedup_main(parser, args)
        return
    if args.mode == "kfold":
        kfold.main(args)
        return
    if args.first_seed < 0 or args.seeds < 1:
        parser.error("--first-seed must be at least 0 and --seeds at least 1")
    traces = run_simulated(args) if args.mode == "simulate" else run_service(args)
    text = report(traces, args.trials, surrogate=args.mode == "simulate")
    print(text)
    if args.out:
        write_outputs(traces, args.out, text)
        print(f"\nwrote {args.out}/anytime.html, table.txt, traces.json, rank_correlation.json")


if __name__ == "__main__":
    main()
