"""The freeze-thaw rule (ASHA in promotion mode), pure: logical trial number -> reported values.

Here so that the pruner (``_pruners.AshaPruner``), its spec (``pruners/_asha.py``), the claim
(:mod:`search.coordination`) and the simulator (``benchmarks/search_sim.py``) all apply this one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PAUSED_AT_ATTR = "paused_at"
"""User attribute of a trial that paused: the epoch (a rung) its kept checkpoint holds."""

Values = Mapping[int, Mapping[int, float]]
"""Logical trial number -> {epoch: reported value}."""


def rungs(first: int, factor: int, epochs: int) -> list[int]:
    """The epochs where trials may pause: ``first * factor**k`` below ``epochs``."""
    out, rung = [], first
    while rung < epochs:
        out.append(rung)
        rung *= factor
    return out


def top_at(values: Values, rung: int, factor: int, maximize: bool = False) -> set[int]:
    """The logical trials in the top ``1/factor`` (rounded down) of those that reached ``rung``."""
    reached = [(v[rung], number) for number, v in values.items() if rung in v and v[rung] == v[rung]]
    keep = len(reached) // factor
    reached.sort(key=lambda pair: (-pair[0] if maximize else pair[0], pair[1]))
    return {number for _, number in reached[:keep]}


def goes_on(values: Values, number: int, rung: int, factor: int, maximize: bool = False) -> bool:
    """Whether trial ``number``, at ``rung``, goes on now (else it pauses there)."""
    return number in top_at(values, rung, factor, maximize)


def to_resume(values: Values, paused: Mapping[int, int], factor: int, maximize: bool = False) -> int | None:
    """The paused trial (``paused``: logical number -> its rung) to resume now, if any: from the
    highest rung down, the best paused trial in its rung's top ``1/factor``.
    """
    sign = -1 if maximize else 1
    for rung in sorted(set(paused.values()), reverse=True):
        top = top_at(values, rung, factor, maximize)
        earned = [number for number, at in paused.items() if at == rung and number in top]
        if earned:
            return min(earned, key=lambda n: (sign * values[n][rung], n))
    return None


def logical_values(trials: Iterable[Any]) -> dict[int, dict[int, float]]:
    """Each logical trial's reported values, from Optuna trials (a retry or resumption carries its
    first attempt's number as ``failed_trial`` and its values before it: the newest attempt's are kept)."""
    out: dict[int, dict[int, float]] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        number = int(trial.system_attrs.get("failed_trial", trial.number))
        out[number] = {**out.get(number, {}), **trial.intermediate_values}
    return out
