"""Wall-clock speed-up in simulated time: how much sooner W workers reach the one-worker script's result.

Issue 48's target: for each task and seed, the seeds' script (``script``: ``TPESampler(seed=s)`` +
``MedianPruner(n_startup_trials=5, n_warmup_steps=3)``, one process) runs its 200 trials; its final
best is the target and T1 the simulated time at which it first reached it. Each strategy with W
workers runs its own 200 trials; TW is the simulated time at which its best first reached the target
(never, if it did not within those trials; ``--strategy-trials`` gives the strategies more). The
speed-up is T1 / TW, 0 for a seed that never reached it (counted, not left out), and the target is
at least 0.5 x W.

Simulated time is LCBench's own: each epoch costs what the surrogate's ``time`` output says for that
configuration (``bench_search.SurrogateProblem``), so a worker that picks faster configurations is
faster, as it would be. A pause and a resumption cost what ``--pause-cost`` and ``--resume-cost``
say, in the trial's own epochs (``search_sim.simulate``). Nothing else costs time: no trial start-up
for any strategy (the script's included), no database latency.

  python benchmarks/bench_search.py speedup --tasks 167168,168868,189909 --workers 8,32 --seeds 5 --jobs 2
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

try:  # benchmarks/ on the path, as bench_search.py puts it
    from search_sim import Event, Trace, simulate
except ModuleNotFoundError:  # imported as benchmarks.speedup (the tests)
    from benchmarks.search_sim import Event, Trace, simulate

BASELINE = "script"


def time_to_reach(events: Sequence[Event], target: float) -> float:
    """Simulated seconds at which the best value first was ``target`` or better (inf if never)."""
    return next((e.seconds for e in events if e.best <= target), math.inf)


@dataclass(frozen=True)
class Reach:
    """One strategy, worker count and seed against the one-worker script on the same task and seed."""

    problem: str
    strategy: str
    workers: int
    seed: int
    target: float
    """The script's final best."""
    t1: float
    """When the script first reached it."""
    tw: float
    """When this strategy first reached it (inf: never, within its trials)."""
    best: float
    """This strategy's final best (how near a ``never`` came)."""

    @property
    def speedup(self) -> float:
        return self.t1 / self.tw if math.isfinite(self.tw) and self.tw > 0 else 0.0


def reaches(traces: Sequence[Trace], baseline: str = BASELINE) -> list[Reach]:
    """Every non-baseline trace against the baseline trace of its problem and seed."""
    base = {(t.problem, t.seed): t for t in traces if t.strategy == baseline}
    out = []
    for t in traces:
        ref = base.get((t.problem, t.seed))
        if t.strategy == baseline or ref is None or not ref.events:
            continue
        target = ref.events[-1].best
        t1 = time_to_reach(ref.events, target)
        best = t.events[-1].best if t.events else math.inf
        out.append(Reach(t.problem, t.strategy, t.workers, t.seed, target, t1, time_to_reach(t.events, target), best))
    return out


def _summary(rows: Sequence[Reach], factor: float) -> str:
    speeds = [r.speedup for r in rows]
    goal = factor * rows[0].workers
    met = sum(s >= goal for s in speeds)
    never = sum(math.isinf(r.tw) for r in rows)
    verdict = "met" if statistics.median(speeds) >= goal else "MISSED"
    near = statistics.median(r.best / r.target for r in rows)
    median = statistics.median(speeds)
    return f"{median:>8.2f} {met:>4}/{len(rows):<3} {never:>5} {near:>11.3f}   {goal:>5.1f} {verdict}"


def speedup_table(rows: Sequence[Reach], factor: float = 0.5) -> str:
    """Per task, strategy and worker count: each seed's speed-up (``never`` if it did not reach the
    target), the median over seeds counting a never as 0, how many seeds met ``factor`` x W and how
    many never reached the target; then the same over all tasks and seeds."""
    lines = [f"speed-up = T1 / TW (simulated time; T1: the one-worker {BASELINE} reaching its own final best "
             f"after its trials, TW: the strategy with W workers reaching that value); never counts as 0; "
             f"target: at least {factor:g} x W; best/target: the strategy's final best over the {BASELINE}'s "
             f"(median over seeds, 1 or less reaches it); met: seeds at or above the target"]  # fmt: skip
    groups: dict[tuple[str, str, int], list[Reach]] = defaultdict(list)
    for r in rows:
        groups[(r.problem, r.strategy, r.workers)].append(r)
    seeds = sorted({r.seed for r in rows})
    cells = "".join(f"{'seed ' + str(s):>9}" for s in seeds)
    head = f"{'median':>8} {'met':>8} {'never':>5} {'best/target':>11} {'goal':>7}"
    lines.append(f"{'task':16} {'strategy':18} {'W':>3}{cells} {head}")
    for (problem, strategy, workers), group in sorted(groups.items()):
        by_seed = {r.seed: r for r in group}
        per = "".join(f"{_cell(by_seed.get(s)):>9}" for s in seeds)
        lines.append(f"{problem:16} {strategy:18} {workers:>3}{per} {_summary(group, factor)}")
    lines.append(f"\nover all tasks and seeds\n{'strategy':18} {'W':>3} {'tasks x seeds':>13} {head}")
    overall: dict[tuple[str, int], list[Reach]] = defaultdict(list)
    for r in rows:
        overall[(r.strategy, r.workers)].append(r)
    for (strategy, workers), group in sorted(overall.items()):
        lines.append(f"{strategy:18} {workers:>3} {len(group):>13} {_summary(group, factor)}")
    lines.append(f"\n{BASELINE}'s T1 (simulated s) per task and seed")
    t1s: dict[str, dict[int, float]] = defaultdict(dict)
    for r in rows:
        t1s[r.problem][r.seed] = r.t1
    for problem, by_seed in sorted(t1s.items()):
        lines.append(f"{problem:16} " + "".join(f"{by_seed.get(s, math.nan):>9.0f}" for s in seeds))
    return "\n".join(lines)


def _cell(r: Reach | None) -> str:
    if r is None:
        return "-"
    return "never" if math.isinf(r.tw) else f"{r.speedup:.2f}"


def _one_seed(task: str, seed: int, names: str, workers: Sequence[int], trials: tuple[int, int],
              costs: tuple[float, float]) -> list[Trace]:  # fmt: skip
    """The script once, then each strategy at each worker count: one task and seed (one process's job)."""
    import bench_search

    problem = bench_search.SurrogateProblem(task)
    chosen = bench_search._chosen(argparse.Namespace(strategies=names))
    script = bench_search.strategies()[BASELINE]
    traces = [simulate(problem, script, 1, seed, trials=trials[0])]
    for strategy in chosen.values():
        for w in workers:
            trace = simulate(problem, strategy, w, seed, trials=trials[1], pause_cost=costs[0], resume_cost=costs[1])
            trace.workers = w
            traces.append(trace)
    print(f"  {problem.name} seed {seed} done", file=sys.stderr, flush=True)
    return traces


def run(args: argparse.Namespace) -> list[Trace]:
    """Every task and seed, ``--jobs`` at a time (each simulation is one single-threaded process)."""
    workers = [int(w) for w in args.workers.split(",")]
    costs = (args.pause_cost, args.resume_cost)
    trials = (args.trials, args.strategy_trials or args.trials)
    jobs = [(task, seed, args.strategies, workers, trials, costs)
            for task in args.tasks.split(",") for seed in range(args.seeds)]  # fmt: skip
    if args.jobs <= 1:
        return [t for job in jobs for t in _one_seed(*job)]
    with ProcessPoolExecutor(args.jobs) as pool:
        return [t for traces in pool.map(_one_seed, *zip(*jobs, strict=True)) for t in traces]


def read(paths: Sequence[str]) -> list[Trace]:
    """Traces that ``--out`` wrote (traces.json), to print one table over several runs."""
    import json
    from pathlib import Path

    rows = [row for path in paths for row in json.loads(Path(path).read_text())]
    return [Trace(r["strategy"], r["problem"], r["workers"], r["seed"], [Event(**e) for e in r["events"]],
                  r.get("curves", []), r.get("resumes", 0)) for r in rows]  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", default="167168,168868,189909")
    parser.add_argument("--workers", default="8,32")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=200, help="the script's budget, and each strategy's [200]")
    parser.add_argument("--strategy-trials", type=int, default=0,
                        help="each strategy's budget instead (to see when it gets there past --trials)")  # fmt: skip
    parser.add_argument("--strategies", default="default,optuna-parallel,tpe+asha:min=3")
    parser.add_argument("--pause-cost", type=float, default=0.05,
                        help="epochs (of that trial) a worker spends pausing a trial [0.05]")  # fmt: skip
    parser.add_argument("--resume-cost", type=float, default=0.1,
                        help="epochs (of that trial) a resumption costs before its next epoch [0.1]")  # fmt: skip
    parser.add_argument("--factor", type=float, default=0.5, help="the target: speed-up at least FACTOR x W")
    parser.add_argument("--jobs", type=int, default=1, help="simulations side by side (one core each)")
    parser.add_argument("--read", nargs="+", metavar="TRACES_JSON",
                        help="print the table of these runs' traces.json instead of simulating")  # fmt: skip
