"""A window on the trials TPE reads: its suggestion's time stays flat as a study grows."""

from __future__ import annotations

import heapq
from typing import Any

from optuna.samplers import BaseSampler
from optuna.trial import TrialState

from search.settings._seeing import SeeingSampler

_USED = (TrialState.COMPLETE, TrialState.PRUNED)
"""The finished trials TPE models (a failed one it never reads)."""


class _Looked:
    """What the window has read of one study so far: the trials a later read need not go over again.

    Trials are numbered densely from 0 and listed in number order, and a finished trial never
    changes: a read goes over the trials new since the last one and those unfinished at it alone.
    """

    def __init__(self, study_id: int, best: int, minimize: bool | None) -> None:
        self.study_id, self.size, self.minimize = study_id, best, minimize
        self.looked = 0  # trials[:looked] have been gone over
        self.unfinished: set[int] = set()  # their numbers, among those gone over
        self.used = 0  # COMPLETE or PRUNED, among those gone over
        self.best: list[tuple[float, int]] = []  # a heap of the best ``size`` complete: the worst on top

    def update(self, trials: list[Any]) -> None:
        fresh = [trials[n] for n in sorted(self.unfinished)] + trials[self.looked :]
        self.unfinished, self.looked = set(), len(trials)
        for t in fresh:
            if t.state in _USED:
                self.used += 1
                if t.state == TrialState.COMPLETE and self.minimize is not None and self.size:
                    self._rank(t)
            elif t.state != TrialState.FAIL:
                self.unfinished.add(t.number)

    def _rank(self, trial: Any) -> None:
        value = trial.value
        if value is None:
            return
        # Ties go to the earlier trial, as a stable sort by value would.
        heapq.heappush(self.best, (-value if self.minimize else value, -trial.number))
        if len(self.best) > self.size:
            heapq.heappop(self.best)

    def best_numbers(self) -> set[int]:
        return {-number for _, number in self.best}


class Windowed(SeeingSampler):
    """``inner`` (TPE) sees at most ``window`` of the study's finished trials: the best tenth of
    them by value and the most recent others, with every unfinished trial (constant liar's).

    TPE's suggestion goes over every finished trial (1.9 s at 100,000 trials, docs/clusters.md):
    through the window it costs what it costs at ``window`` trials, plus a pass over the trials new
    since the last suggestion. A study with no more finished trials than ``window`` is sampled
    exactly as without it (its trials are handed over as read). The window is chosen once per
    trial: its params are suggested from one read of the study (``search.execution._suggest``).
    Several objectives: the most recent only (no single "best").
    """

    def __init__(self, inner: BaseSampler, window: int) -> None:
        self.inner, self.window = inner, window
        self._memo: tuple[tuple[int, int], list[Any]] | None = None
        self._looked: _Looked | None = None

    def seen(self, study: Any, trial: Any) -> Any:
        from storage import study_seeing

        return study_seeing(study, lambda trials: self._select(trials, trial.number, study))

    def _select(self, trials: list[Any], number: int, study: Any) -> list[Any]:
        if len(trials) <= self.window:  # no more finished trials than the window
            return trials
        key = (number, len(trials))
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        dense = trials[0].number == 0 and trials[-1].number == len(trials) - 1
        looked = self._look(trials, study, dense)
        if looked.used <= self.window:
            seen = trials
        else:
            keep = looked.best_numbers()
            for t in reversed(trials):
                if len(keep) >= self.window:
                    break
                if t.state in _USED:
                    keep.add(t.number)
            keep |= looked.unfinished
            seen = [trials[n] for n in sorted(keep)] if dense else [t for t in trials if t.number in keep]
        self._memo = (key, seen)
        return seen

    def _look(self, trials: list[Any], study: Any, dense: bool) -> _Looked:
        """The study's trials gone over: only those new or unfinished since the last read when the
        trials are numbered densely (as Optuna numbers them), else every one again."""
        from storage import study_id

        sid = study_id(study)
        looked = self._looked
        if not dense or looked is None or looked.study_id != sid or looked.looked > len(trials):
            looked = None
        if looked is None:
            minimize = None if len(study.directions) > 1 else study.direction == _minimize()
            looked = self._looked = _Looked(sid, self.window // 10, minimize)
        looked.update(trials)
        return looked


def _minimize() -> Any:
    from optuna.study import StudyDirection

    return StudyDirection.MINIMIZE
