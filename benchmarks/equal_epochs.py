"""Strategies of a ``bench_search.py service`` run compared seed by seed, at equal trials and at equal epochs.

``bench_search.py`` pairs strategies at the trial budget. A strategy that trains more epochs for the
same trials (population-based training's continuations, a thaw after the budget) may win there by
spending more; this reads the run's ``traces.json`` and pairs each strategy with ``--reference`` at
both: its final best (the same logical trials), and its best once each had trained the smaller of
their two epoch totals.

    python benchmarks/equal_epochs.py /tmp/out/traces.json --reference script
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any


def best_at(trace: dict[str, Any], epochs: float = math.inf) -> float:
    """The best value found once the search had trained at most ``epochs`` (inf: none found)."""
    best = math.inf
    for event in trace["events"]:
        if event["epochs"] > epochs:
            break
        best = event["best"]
    return best


def total_epochs(trace: dict[str, Any]) -> float:
    return trace["events"][-1]["epochs"] if trace["events"] else 0.0


def compare(traces: list[dict[str, Any]], reference: str) -> list[str]:
    """The report's lines: per seed, each strategy's final best and epochs; then the paired counts."""
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for trace in traces:
        runs.setdefault(trace["strategy"], {})[trace["seed"]] = trace
    if reference not in runs:
        raise SystemExit(f"no strategy {reference!r} in the traces: {', '.join(runs)}")
    names = list(runs)
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in runs.values())))
    lines = ["seed  " + "".join(f"{name:>26}" for name in names)]
    for seed in seeds:
        cells = (f"{best_at(runs[n][seed]):>12.4g} ({total_epochs(runs[n][seed]):>5.0f} ep)" for n in names)
        lines.append(f"{seed:<6}" + "".join(f"{cell:>26}" for cell in cells))
    medians = (f"{statistics.median(best_at(runs[n][s]) for s in seeds):>12.4g}" for n in names)
    lines.append("median" + "".join(f"{m:>26}" for m in medians))
    lines.append(f"\nwins-losses against {reference}: final best (equal trials), best at equal epochs")
    for name in names:
        if name == reference:
            continue
        final = [(best_at(runs[name][s]), best_at(runs[reference][s])) for s in seeds]
        equal = []
        for s in seeds:
            budget = min(total_epochs(runs[name][s]), total_epochs(runs[reference][s]))
            equal.append((best_at(runs[name][s], budget), best_at(runs[reference][s], budget)))
        lines.append(f"  {name:<28} {_count(final):>6}   {_count(equal):>6}")
    return lines


def _count(pairs: list[tuple[float, float]]) -> str:
    return f"{sum(a < b for a, b in pairs)}-{sum(a > b for a, b in pairs)}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", type=Path, help="a bench_search.py run's traces.json")
    parser.add_argument("--reference", default="script", help="the strategy the others are paired with [script]")
    args = parser.parse_args(argv)
    print("\n".join(compare(json.loads(args.traces.read_text()), args.reference)))


if __name__ == "__main__":
    main()
