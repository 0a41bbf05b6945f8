"""Strategies of ``bench_search.py`` runs compared seed by seed: at equal trials, at equal epochs, and
given the reference's compute.

``bench_search.py`` pairs strategies at the trial budget. A strategy that trains more epochs for the
same trials (population-based training's continuations, a thaw after the budget) may win there by
spending more; one that trains fewer (pruning, ``--patience``) may lose there and still be the
better use of compute. This reads the runs' ``traces.json`` files (``service`` or ``simulate``, one
or several) and pairs each strategy with ``--reference`` on the same problem, worker count and seed
(a one-process reference such as ``script`` pairs with every worker count). Three readings:

* equal trials: each one's best after the trial budget (``--at-trials N``: after N trials);
* equal epochs: each one's best once both had trained the smaller of their two epoch totals there;
* the reference's compute: the strategy's best once it had trained the epochs the reference trained
  for those trials, however many trials that took it (in a ``simulate`` run, which trains on past the
  trial budget, or a ``service`` run given more trials than the reference's).

    python benchmarks/equal_epochs.py /tmp/out/traces.json --reference script
    python benchmarks/equal_epochs.py /tmp/a/traces.json /tmp/b/traces.json --reference script --at-trials 40 --summary
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

Key = tuple[str, int, int]
"""(problem, workers, seed)."""


def _last(trace: dict[str, Any], epochs: float = math.inf, trials: float = math.inf) -> dict[str, Any] | None:
    """The last event (a finished trial) once the search had trained at most ``epochs`` and finished
    at most ``trials`` trials; None before the first."""
    last = None
    for event in trace["events"]:
        if event["epochs"] > epochs or event["trials"] > trials:
            break
        last = event
    return last


def best_at(trace: dict[str, Any], epochs: float = math.inf, trials: float = math.inf) -> float:
    """The best value found once the search had trained at most ``epochs`` and finished at most
    ``trials`` trials (inf: none found)."""
    last = _last(trace, epochs, trials)
    return math.inf if last is None else last["best"]


def epochs_at(trace: dict[str, Any], trials: float = math.inf) -> float:
    """Epochs trained when the ``trials``-th trial finished (all of them by default)."""
    last = _last(trace, trials=trials)
    return 0.0 if last is None else last["epochs"]


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven if either side were
    as likely to win each pair (ties left out)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def _key(trace: dict[str, Any]) -> Key:
    return trace.get("problem", ""), trace.get("workers", 0), trace["seed"]


def pairs(traces: list[dict[str, Any]], reference: str) -> dict[str, dict[Key, tuple[dict, dict]]]:
    """Per strategy, its runs with the reference's run on the same key; a reference that ran at one
    worker count per problem (a one-process script) pairs with every worker count."""
    runs: dict[str, dict[Key, dict[str, Any]]] = {}
    for trace in traces:
        runs.setdefault(trace["strategy"], {})[_key(trace)] = trace
    if reference not in runs:
        raise SystemExit(f"no strategy {reference!r} in the traces: {', '.join(runs)}")
    ref = runs.pop(reference)
    counts: dict[str, set[int]] = {}
    for problem, workers, _ in ref:
        counts.setdefault(problem, set()).add(workers)
    loose = {(p, s): t for (p, w, s), t in ref.items() if len(counts[p]) == 1}

    def partner(key: Key) -> dict[str, Any] | None:
        return ref.get(key) or loose.get((key[0], key[2]))

    return {
        name: {key: (trace, partner(key)) for key, trace in by_key.items() if partner(key) is not None}
        for name, by_key in runs.items()
    }


def readings(mine: dict[str, Any], ref: dict[str, Any], trials: float = math.inf) -> tuple[tuple[float, float], ...]:
    """(strategy, reference) best values at equal trials, at equal epochs, and at the reference's compute."""
    ref_epochs = epochs_at(ref, trials)
    budget = min(epochs_at(mine, trials), ref_epochs)
    ref_best = best_at(ref, trials=trials)
    return (
        (best_at(mine, trials=trials), ref_best),
        (best_at(mine, budget, trials), best_at(ref, budget, trials)),
        (best_at(mine, ref_epochs), ref_best),
    )


def compare(traces: list[dict[str, Any]], reference: str, trials: float = math.inf, summary: bool = False) -> list[str]:
    """The report's lines: per run, each strategy's best and epochs (unless ``summary``); then the
    paired counts with the sign test's p."""
    paired = pairs(traces, reference)
    lines = []
    if not summary:
        names = [reference, *paired]
        keys = sorted(set.intersection(*(set(by_key) for by_key in paired.values())) if paired else set())
        # each row's runs in the order of ``names``: the reference's, then each strategy's
        rows = {key: [paired[names[1]][key][1], *(paired[n][key][0] for n in names[1:])] for key in keys}
        lines.append(f"{'problem':22} {'W':>3} {'seed':>4}  " + "".join(f"{name:>26}" for name in names))
        for key, runs in rows.items():
            cells = (f"{best_at(r, trials=trials):>12.4g} ({epochs_at(r, trials):>5.0f} ep)" for r in runs)
            lines.append(f"{key[0]:22} {key[1]:>3} {key[2]:>4}  " + "".join(f"{cell:>26}" for cell in cells))
        for problem, workers in sorted({key[:2] for key in keys}):
            group = [runs for key, runs in rows.items() if key[:2] == (problem, workers)]
            medians = (statistics.median(best_at(runs[i], trials=trials) for runs in group) for i in range(len(names)))
            lines.append(f"{problem:22} {workers:>3} {'median':>6}" + "".join(f"{m:>15.4g}{'':11}" for m in medians))
        lines.append("")
    budget = "the trial budget" if trials == math.inf else f"{trials:g} trials"
    lines.append(
        f"wins-losses against {reference} at {budget} (sign test p): equal trials, equal epochs, and given "
        f"the epochs {reference} trained for them (the strategy's trials run there, median)"
    )
    for name, by_key in paired.items():
        for workers in sorted({key[1] for key in by_key}):
            chosen = [pair for key, pair in by_key.items() if key[1] == workers]
            counts = list(zip(*(readings(mine, ref, trials) for mine, ref in chosen), strict=True))
            ran = statistics.median(_trials_within(mine, epochs_at(ref, trials)) for mine, ref in chosen)
            cells = "".join(f"{_count(c):>18}" for c in counts)
            lines.append(f"  {name:40} W={workers:<3} n={len(chosen):<4}{cells}   ({ran:g} trials)")
    return lines


def _trials_within(trace: dict[str, Any], epochs: float) -> int:
    last = _last(trace, epochs)
    return 0 if last is None else last["trials"]


def _count(pairs: tuple[tuple[float, float], ...]) -> str:
    wins, losses = sum(a < b for a, b in pairs), sum(a > b for a, b in pairs)
    return f"{wins}-{losses} ({sign_test(wins, losses):.2f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", type=Path, nargs="+", help="bench_search.py runs' traces.json files")
    parser.add_argument("--reference", default="script", help="the strategy the others are paired with [script]")
    parser.add_argument("--at-trials", type=int, default=0, help="read each run after this many trials [all]")
    parser.add_argument("--summary", action="store_true", help="the paired counts only, not every run")
    args = parser.parse_args(argv)
    traces = [trace for path in args.traces for trace in json.loads(path.read_text())]
    print("\n".join(compare(traces, args.reference, args.at_trials or math.inf, args.summary)))


if __name__ == "__main__":
    main()
