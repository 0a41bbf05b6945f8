"""TPE beside running trials: a running trial that has reported is read as complete, at the final
value its curve so far ranks it at (a "believer" in place of the constant liar's bad value)."""

from __future__ import annotations

import bisect
import copy
import math
from typing import Any

from optuna.samplers import BaseSampler
from optuna.trial import TrialState

from search.settings._seeing import SeeingSampler

MIN_CURVES = 3
"""Complete trials that reported at a running trial's last epoch, at least, before it is believed."""


class Believer(SeeingSampler):
    """Once at least ``beside`` trials run beside the one sampled, ``inner`` (TPE) reads each running
    trial that has reported, at an epoch that ranks the complete trials (Spearman of their best so
    far there with their final values at least ``rho``), as complete: its value is the final value
    found at the same rank among the complete trials that reported at that epoch. The others stay
    running (the constant liar's bad value), and so do all of them in a study with constraints,
    whose values a running trial does not have yet.

    With many workers most of what the study knows is in the running trials' curves; the constant
    liar alone counts all of them as bad. On LCBench's curves (simulated) believing them found better
    models at every budget with 32 workers, and leaned better with 4 and 8; with 2 and 3 it did not,
    so the default waits for 3 running trials (docs/experiments/2026-11-29-believer.md). One
    objective only; with one worker nothing runs beside a trial and the search is the inner
    sampler's, draw for draw.
    """

    def __init__(self, inner: BaseSampler, beside: int = 1, rho: float = 0.8) -> None:
        self.inner, self.beside, self.rho = inner, beside, rho
        self._memo: tuple[int, list[Any], list[Any]] | None = None  # trial number, read, what it is shown
        self._seen = Seen()

    def seen(self, study: Any, trial: Any) -> Any:
        from storage import study_seeing

        if len(study.directions) > 1:
            return study
        minimize = study.direction.name == "MINIMIZE"

        def select(trials: list[Any]) -> list[Any]:
            # A trial's parameters are suggested from one read of the study: believed once for them all.
            if self._memo is None or self._memo[0] != trial.number or self._memo[1] is not trials:
                seen = believe(trials, trial.number, minimize, self.rho, self.beside, self._seen)
                self._memo = (trial.number, trials, seen)
            return self._memo[2]

        return study_seeing(study, select)


class Seen:
    """What believing read of the complete trials, kept from one read to the next (a complete trial
    never changes): each one's best so far per epoch, whether any has constraints, and each epoch's
    ranking while the complete trials read are the same."""

    def __init__(self) -> None:
        self.key: tuple[float, ...] = ()
        self.constrained = False
        self.bests: dict[int, dict[int, float]] = {}  # trial number -> epoch -> best until then
        self.by_epoch: dict[int, tuple[list[float], list[float]] | None] = {}

    def complete(self, trials: list[Any], sign: float) -> list[tuple[dict[int, float], float]] | None:
        """Each complete trial's bests per epoch and final value; None in a study with constraints."""
        done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
        numbers = [t.number for t in done]
        key = (sign, len(numbers), sum(numbers), max(numbers, default=-1))
        if key != self.key:
            self.key, self.by_epoch = key, {}
            self.constrained = any(t.constraints for t in done)
            self.bests = (
                {} if self.constrained else {t.number: self.bests.get(t.number) or _bests(t, sign) for t in done}
            )
        if self.constrained:
            return None
        return [(self.bests[t.number], sign * t.value) for t in done]


def believe(trials: list[Any], number: int, minimize: bool, rho: float, beside: int = 1,
            seen: Seen | None = None) -> list[Any]:  # fmt: skip
    """``trials`` with each running one (but ``number``, the trial being sampled) that can be
    believed replaced by a complete copy at its believed final value, where at least ``beside``
    run; the list itself if none is. ``seen`` keeps what one read learnt for the next."""
    others = [t for t in trials if t.state == TrialState.RUNNING and t.number != number]
    running = [t for t in others if t.intermediate_values]
    if not running or len(others) < beside:
        return trials
    sign = 1.0 if minimize else -1.0
    seen = seen or Seen()
    complete = seen.complete(trials, sign)
    if complete is None:
        return trials  # a running trial's constraints are not known until it ends: the liar's
    by_epoch = seen.by_epoch
    believed: dict[int, Any] = {}
    for t in running:
        epoch = max(t.intermediate_values)
        if epoch not in by_epoch:
            by_epoch[epoch] = _ranking(complete, epoch, rho)
        reference = by_epoch[epoch]
        if reference is None:
            continue
        partial, final = reference  # both sorted
        mine = _bests(t, sign)[epoch]
        below = (bisect.bisect_left(partial, mine) + bisect.bisect_right(partial, mine)) / 2
        value = final[min(len(final) - 1, int(below / len(partial) * len(final)))]
        twin = copy.copy(t)
        twin.state, twin.values = TrialState.COMPLETE, [sign * value]
        believed[t.number] = twin
    return [believed.get(t.number, t) for t in trials] if believed else trials


def _bests(trial: Any, sign: float) -> dict[int, float]:
    """Epoch -> the trial's best (signed: lower is better) until that epoch, where it reported."""
    out, best = {}, math.inf
    for step in sorted(trial.intermediate_values):
        best = min(best, sign * trial.intermediate_values[step])
        out[step] = best
    return out


def _ranking(
    complete: list[tuple[dict[int, float], float]], epoch: int, rho: float
) -> tuple[list[float], list[float]] | None:
    """The complete trials' bests until ``epoch`` and their final values, each sorted (signed: lower is
    better), where at least ``MIN_CURVES`` reported there and that epoch ranks them; else None."""
    from search.settings._pruners import spearman

    pairs = [(bests[epoch], final) for bests, final in complete if epoch in bests]
    if len(pairs) < MIN_CURVES or spearman(pairs) < rho:
        return None
    return sorted(p for p, _ in pairs), sorted(f for _, f in pairs)
