"""Best value after a trial budget on the LCBench surrogate, each strategy paired with a reference.

``bench_search.py simulate`` trains every search on to 126 FTE whatever ``--trials`` says, which
takes hours for a sampler that slows as its trials grow (Optuna's Gaussian process, where pruning
makes thousands of trials). This stops each search once ``--trials`` trials have finished, as a
user's ``search start --trials N`` does, and reads the best complete value then and the epochs it
took. The reference (``script`` by default: the one-process script users copy) is paired with every
worker count; W-L counts the strategy's wins and losses on the same task, worker count and seed, p
is the two-sided sign test's.

    python benchmarks/at_trials.py --tasks 3945,34539 --workers 1,2 --seeds 5 --trials 40 \\
      --strategies "script,default,gp+median:warmup=3+patience=off" --out /tmp/at40.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from bench_search import SurrogateProblem, spec_strategy, strategies  # noqa: E402
from equal_epochs import pairs, sign_test  # noqa: E402
from search_sim import simulate  # noqa: E402


def run(tasks: list[str], workers: list[int], seeds: range, names: list[str], trials: int,
        out: Path | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """One search per task, worker count, seed and strategy (a one-process strategy once per task
    and seed), each stopped at ``trials`` finished trials; a row each."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    table, rows = strategies(), []
    for task in tasks:
        problem = SurrogateProblem(task)
        for w in workers:
            for seed in seeds:
                for name in names:
                    strategy = table.get(name) or spec_strategy(name)
                    if strategy.sequential and w != workers[0]:
                        continue
                    began = time.monotonic()
                    trace = simulate(problem, strategy, w, seed, trials=trials, epochs_budget=0)
                    last = trace.events[-1]
                    rows.append({"task": task, "workers": 1 if strategy.sequential else w, "seed": seed,
                                 "strategy": name, "sequential": strategy.sequential, "best": last.best,
                                 "epochs": last.epochs, "trials": last.trials})  # fmt: skip
                    print(f"  {task} W={w} seed {seed} {name}: {last.best:.4g} after {last.epochs} epochs "
                          f"({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
                    if out is not None:
                        out.write_text(json.dumps(rows))
    return rows


def paired(rows: list[dict[str, Any]], reference: str) -> list[str]:
    """Per worker count and strategy: W-L against ``reference`` (one-process: paired with every
    worker count, as ``equal_epochs.pairs`` pairs runs), the sign test's p, the median ratio of best
    values and of epochs."""
    traces = [{"strategy": r["strategy"], "problem": r["task"], "workers": r["workers"], "seed": r["seed"],
               "events": [{key: r[key] for key in ("best", "epochs", "trials")}]} for r in rows]  # fmt: skip
    by_strategy = pairs(traces, reference)
    head = f"  {'strategy':50s} {'workers':>7s} {'W-L (p)':>13s} {'best ratio':>10s} {'epochs ratio':>12s}"
    lines = [f"after {rows[0]['trials'] if rows else 0} trials, against {reference} (same task and seed)", head]
    for w in sorted({r["workers"] for r in rows}):
        for name, by_key in by_strategy.items():
            found = [(mine["events"][0], ref["events"][0]) for key, (mine, ref) in by_key.items() if key[1] == w]
            if not found:
                continue
            wins = sum(a["best"] < b["best"] for a, b in found)
            losses = sum(a["best"] > b["best"] for a, b in found)
            best = statistics.median(a["best"] / b["best"] for a, b in found)
            epochs = statistics.median(a["epochs"] / b["epochs"] for a, b in found)
            lines.append(f"  {name:50s} {w:>7d} {f'{wins}-{losses} ({sign_test(wins, losses):.2f})':>13s} "
                         f"{best:>10.3f} {epochs:>12.2f}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="3945,34539,146212,189906")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--strategies", default="script,default", help="names or SAMPLER+PRUNER[+patience=P] specs")
    parser.add_argument("--reference", default="script")
    parser.add_argument("--out", type=Path, help="rows as JSON, written as they come")
    parser.add_argument("--read", type=Path, nargs="+", help="tabulate earlier --out files instead of running")
    args = parser.parse_args(argv)
    if args.read:
        rows = [row for path in args.read for row in json.loads(path.read_text())]
    else:
        names = [n for n in args.strategies.split(",") if n]
        if args.reference not in names:
            names.insert(0, args.reference)
        rows = run(args.tasks.split(","), [int(w) for w in args.workers.split(",")],
                   range(args.first_seed, args.first_seed + args.seeds), names, args.trials, args.out)  # fmt: skip
    print("\n".join(paired(rows, args.reference)))


if __name__ == "__main__":
    main()
