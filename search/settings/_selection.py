"""The champion among a study's trials (``--select``): the Pareto front of its feasible complete
trials, and the rule that picks one of them.

* ``first`` (the default): the best value of the first objective among feasible trials; with one
  objective and no constraint, the study's best trial as it always was.
* ``knee``: the point of the Pareto front closest to the utopia point (each objective's best on the
  front) once every objective is scaled to [0, 1] over the front: the trial that gives up least on
  all of them at once. With one objective it is ``first``'s trial.

Ties go to the lower trial number. Pure functions over :class:`Candidate`; the callers turn
Optuna's trials into candidates (:func:`candidates`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from search.exceptions import SearchError

SELECT_RULES = ("first", "knee")


@dataclass(frozen=True)
class Candidate:
    number: int
    values: tuple[float, ...]
    feasible: bool = True


def parse_select(value: object) -> str:
    text = str(value).strip().lower()
    if text not in SELECT_RULES:
        raise SearchError(f"--select {value!r}: choose one of {', '.join(SELECT_RULES)}")
    return text


def _oriented(c: Candidate, maximize: Sequence[bool]) -> tuple[float, ...]:
    """Values with every objective turned into one to minimise."""
    return tuple(-v if up else v for v, up in zip(c.values, maximize, strict=True))


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether ``a`` is no worse than ``b`` everywhere and better somewhere (both minimised)."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


def pareto_front(candidates: Iterable[Candidate], maximize: Sequence[bool]) -> list[Candidate]:
    """The feasible candidates no other feasible one dominates, in number order."""
    feasible = [c for c in candidates if c.feasible and all(math.isfinite(v) for v in c.values)]
    points = {c.number: _oriented(c, maximize) for c in feasible}
    front = [c for c in feasible if not any(dominates(points[o.number], points[c.number]) for o in feasible)]
    return sorted(front, key=lambda c: c.number)


def select(candidates: Iterable[Candidate], maximize: Sequence[bool], rule: str = "first") -> Candidate | None:
    """The champion under ``rule`` (``first`` or ``knee``); None when no candidate is feasible."""
    rule = parse_select(rule)
    front = pareto_front(candidates, maximize)
    if not front:
        return None
    if rule == "first" or len(front) == 1:
        # The best first objective is always on the front (the others break its ties there).
        return min(front, key=lambda c: (_oriented(c, maximize)[0], c.number))
    points = [_oriented(c, maximize) for c in front]
    lows = [min(p[i] for p in points) for i in range(len(maximize))]
    highs = [max(p[i] for p in points) for i in range(len(maximize))]

    def distance(p: tuple[float, ...]) -> float:
        return math.hypot(*((x - lo) / (hi - lo) if hi > lo else 0.0 for x, lo, hi in zip(p, lows, highs, strict=True)))

    return min(zip(front, points, strict=True), key=lambda cp: (distance(cp[1]), cp[0].number))[0]


def candidates(trials: Iterable[Any]) -> list[Candidate]:
    """Optuna's complete trials (``FrozenTrial``) with values, as candidates: a trial is feasible
    when each of its constraint values (Optuna's ``constraints``) is at most 0."""
    out = []
    for t in trials:
        if t.state.name != "COMPLETE" or not t.values:
            continue
        out.append(Candidate(t.number, tuple(float(v) for v in t.values), all(v <= 0 for v in t.constraints.values())))
    return out


def champion_number(trials: Iterable[Any], maximize: Sequence[bool], rule: str = "first") -> int | None:
    """The number of the trial ``rule`` picks among Optuna's ``trials``, None before a feasible one completes."""
    chosen = select(candidates(trials), maximize, rule)
    return None if chosen is None else chosen.number
