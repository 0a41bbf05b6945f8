"""The freeze-thaw rule (ASHA in promotion mode), pure: logical trial number -> reported values.

Here so that the pruner (``_pruners.AshaPruner``), its spec (``pruners/_asha.py``), the claim
(:mod:`search.coordination`) and the simulator (``benchmarks/search_sim.py``) all apply this one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

PAUSED_AT_ATTR = "paused_at"
"""User attribute of a trial that paused: the epoch (a rung) its kept checkpoint holds."""
BUDGET_ATTR = "hpsearch.budget"
"""Study user attribute: the trial budget (logical trials)."""
STOPPED_ATTR = "hpsearch.ended_early"
"""Study user attribute: why a search took no new trial before its budget (``--timeout``, ``--stop-at``,
``--epoch-budget``, an objective its trials cannot score); cleared on resume. No paused trial resumes while
it is set."""

Values = Mapping[int, Mapping[int, float]]
"""Logical trial number -> {epoch: reported value}."""


def rungs(first: int, factor: int, epochs: int) -> list[int]:
    """The epochs where trials may pause: ``first * factor**k`` below ``epochs``."""
    out, rung = [], first
    while rung < epochs:
        out.append(rung)
        rung *= factor
    return out


def top_at(values: Values, rung: int, factor: int, maximize: bool = False, at_least_one: bool = False) -> set[int]:
    """The logical trials in the top ``1/factor`` (rounded down; at least the best one with
    ``at_least_one``) of those that reached ``rung``."""
    reached = [(v[rung], number) for number, v in values.items() if rung in v and v[rung] == v[rung]]
    keep = max(len(reached) // factor, 1 if at_least_one else 0)
    reached.sort(key=lambda pair: (-pair[0] if maximize else pair[0], pair[1]))
    return {number for _, number in reached[:keep]}


def goes_on(values: Values, number: int, rung: int, factor: int, maximize: bool = False,
            spent: bool = False) -> bool:  # fmt: skip
    """Whether trial ``number``, at ``rung``, goes on now (else it pauses there). ``spent``: as in
    :func:`to_resume`, the best there goes on, which paused would be resumed at once."""
    return number in top_at(values, rung, factor, maximize, at_least_one=spent)


def budget_started(study_attrs: Mapping[str, Any], trials: Iterable[Any]) -> bool:
    """Whether a study's budget (``BUDGET_ATTR``) has all started, counted as the claim counts it
    (logical trials a worker took: not queued ones never started), and no early stop (``STOPPED_ATTR``)
    holds its paused trials back. False for a study with no budget (a simulator's, unless it sets one)."""
    budget = study_attrs.get(BUDGET_ATTR)
    if not budget or study_attrs.get(STOPPED_ATTR) is not None:
        return False
    started = {_logical(t) for t in trials if t.state.name != "WAITING"}
    return len(started) >= int(budget)


def to_resume(values: Values, paused: Mapping[int, int], factor: int, maximize: bool = False,
              spent: bool = False) -> int | None:  # fmt: skip
    """The paused trial (``paused``: logical number -> its rung) to resume now, if any: from the
    highest rung down, the best paused trial in its rung's top ``1/factor``.

    ``spent``: the budget's trials have all started, so no rung fills any more. Then a rung's top
    holds at least its best trial, so that the best of the highest rung goes on (and, rung by rung,
    one trial reaches the last epoch): a budget below ``factor ** len(rungs)`` trials would otherwise
    end with every trial paused and none complete.
    """
    sign = -1 if maximize else 1
    for rung in sorted(set(paused.values()), reverse=True):
        top = top_at(values, rung, factor, maximize, at_least_one=spent)
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


def _logical(trial: Any) -> int:
    return int(trial.system_attrs.get("failed_trial", trial.number))


def trained_at(trials: Iterable[Any], logical: int, epoch: int) -> Any:
    """Population-based training: the attempt whose params trained the checkpoint of ``epoch`` in
    logical trial ``logical``'s folder: its newest attempt that started before ``epoch``, or, where a
    copy started at ``epoch`` (its ``pbt_epoch``), the copied checkpoint's trainer, the same way."""
    trials, seen = list(trials), set()
    while True:
        mine = [t for t in trials if _logical(t) == logical and t.user_attrs.get("pbt_epoch", 0) <= epoch]
        newest = max(mine, key=lambda t: t.number)
        if newest.user_attrs.get("pbt_epoch") != epoch or logical in seen:
            return newest
        seen.add(logical)
        logical = int(newest.user_attrs["pbt_parent"])


def lineage(trials: Iterable[Any], attempt: Any) -> list[tuple[int, dict[str, Any]]]:
    """The schedule of params that trained ``attempt``'s weights under population-based training:
    ``(first epoch trained with them - 1, params)``, oldest first (one entry without a lineage)."""
    trials, schedule = list(trials), list[tuple[int, dict[str, Any]]]()
    while True:
        start = attempt.user_attrs.get("pbt_epoch")
        if not schedule or schedule[-1][1] != attempt.params:
            schedule.append((int(start or 0), dict(attempt.params)))
        else:  # the same params on both sides of a copy: one segment
            schedule[-1] = (int(start or 0), schedule[-1][1])
        if start is None:
            return schedule[::-1]
        attempt = trained_at(trials, int(attempt.user_attrs["pbt_parent"]), int(start))


PAUSED_EVICTED_ATTR = "paused_evicted"
"""User attribute of a paused trial whose checkpoint was removed to keep the paused trials' disk
within its bound (``asha:disk``): the epoch it paused at. It replaces ``paused_at``: the trial is
plainly pruned from then on, never resumed."""

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


class DiskSize(int):
    """Bytes, given as ``20GB``, ``512MiB`` or a plain number of bytes (``asha:disk=...``)."""

    what = "a size such as 20GB or 512MiB"

    def __new__(cls, raw: str | int) -> DiskSize:
        text = str(raw).strip().lower().replace(" ", "")
        number = text.rstrip("kmgtib")
        unit = text[len(number) :]
        try:
            value = float(number) * _UNITS[unit]
        except (KeyError, ValueError):
            raise ValueError(f"not a size: {raw!r}") from None
        if not 0 <= value < math.inf:
            raise ValueError(f"not a size: {raw!r}")
        return super().__new__(cls, int(value))


def to_evict(values: Values, paused: Mapping[int, int], sizes: Mapping[int, int], bound: int, factor: int,
             maximize: bool = False) -> list[int]:  # fmt: skip
    """The paused trials (``paused``: logical number -> its rung) that lose their checkpoints so that
    the others' (``sizes``: bytes per trial) fit in ``bound`` bytes, in the order they go.

    Those least likely to be resumed go first: a trial that has not earned its resumption before one
    that has (one that has goes only when the others are not enough); then the worst standing in its
    rung (its place among the trials that reached it, as a fraction of them); then the lower rung
    (more trials are still to reach it); then the newer trial. A trial with no bytes here goes never.
    """
    total = sum(sizes.get(n, 0) for n in paused)
    if total <= bound:
        return []
    standing = {n: _standing(values, n, at, factor, maximize) for n, at in paused.items()}
    out = []
    for number in sorted(paused, key=lambda n: (*standing[n], paused[n], -n)):
        if total <= bound:
            break
        if sizes.get(number, 0) > 0:
            out.append(number)
            total -= sizes[number]
    return out


def _standing(values: Values, number: int, rung: int, factor: int, maximize: bool) -> tuple[bool, float]:
    """Whether ``number`` has earned its resumption at ``rung``, and minus its place there (0 the
    best, towards -1 the worst; -1 without a finite value): ascending sorts the least promising first."""
    reached = sorted(v[rung] for v in values.values() if rung in v and v[rung] == v[rung])
    own = values.get(number, {}).get(rung, math.nan)
    if own != own or not reached:
        return False, -1.0
    better = sum(1 for v in reached if (v > own if maximize else v < own))
    return number in top_at(values, rung, factor, maximize), -better / len(reached)
