"""TPE's window (``--sampler tpe:window=N``) against none, on the LCBench surrogate, in simulated time.

Each strategy runs ``search_sim.simulate`` (the service's own sampler and pruner objects, W
simulated workers) on the same tasks and seeds for ``--trials`` trials. Printed per task and worker
count: each strategy's final best value (median over seeds, and in how many seeds it is the same
value as the first strategy's, to the last digit), then the median over every task, worker count
and seed of each strategy's final best divided by the first strategy's.

    python benchmarks/window_quality.py --tasks 3945,189906 --workers 1,8 --seeds 3 --trials 200 \\
        --samplers tpe:window=0,tpe,tpe:window=50

The surrogate needs onnxruntime (``benchmarks/requirements.txt``) and ../shared/data/yahpo_lcbench.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from bench_search import SurrogateProblem  # noqa: E402
from search_sim import Strategy, simulate  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    from search.settings import SearchSettings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="3945,189906")
    parser.add_argument("--workers", default="1,8")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--samplers", default="tpe:window=0,tpe,tpe:window=50", help="the first is the reference")
    parser.add_argument("--pruner", default=SearchSettings().pruner, help="[the default: %(default)s]")
    args = parser.parse_args(argv)
    samplers = args.samplers.split(",")
    ratios: dict[str, list[float]] = {s: [] for s in samplers}
    for task in args.tasks.split(","):
        problem = SurrogateProblem(task)
        for workers in [int(w) for w in args.workers.split(",")]:
            finals: dict[str, list[float]] = {s: [] for s in samplers}
            seconds: dict[str, float] = dict.fromkeys(samplers, 0.0)
            for seed in range(args.seeds):
                for spec in samplers:
                    started = time.perf_counter()
                    trace = simulate(problem, Strategy(spec, sampler=spec, pruner=args.pruner), workers, seed,
                                     trials=args.trials)  # fmt: skip
                    seconds[spec] += time.perf_counter() - started
                    finals[spec].append(trace.best_at())
            reference = finals[samplers[0]]
            print(f"{problem.name} W={workers} ({args.seeds} seeds, {args.trials} trials)", flush=True)
            for spec in samplers:
                same = sum(a == b for a, b in zip(finals[spec], reference, strict=True))
                ratios[spec] += [a / b for a, b in zip(finals[spec], reference, strict=True)]
                print(
                    f"  {spec:<20} final best median {statistics.median(finals[spec]):.5f}  "
                    f"same as {samplers[0]} in {same}/{args.seeds} seeds  ({seconds[spec]:.0f} s)",
                    flush=True,
                )
    print(f"final best / {samplers[0]}'s, median over every task, worker count and seed:")
    for spec in samplers:
        print(
            f"  {spec:<20} {statistics.median(ratios[spec]):.4f}  (min {min(ratios[spec]):.4f}, "
            f"max {max(ratios[spec]):.4f})"
        )


if __name__ == "__main__":
    main()
