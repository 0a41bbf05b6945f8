"""A search that ends before its trial budget: after ``--timeout``, once ``--stop-at`` is reached, or
once its trials have trained ``--epoch-budget`` epochs.

No new trial starts after that: the budget becomes the logical trials claimed so far, under the
study lock (so a claim racing the stop either made it in or finds the budget spent), and the trials
running finish as they would; a paused trial (freeze-thaw) is not resumed. The reason is stored with
the study for the summary; resuming the study with ``search start`` asks for the full budget again.
The command's follower checks the limits; near the end of an ``--epoch-budget``, a worker's claim
counts the epochs too (``_no_new_trials.near_epoch_budget``), so none normally starts a trial past it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import storage as st
from search.coordination._attrs import EPOCHS_ATTR
from search.coordination._no_new_trials import (
    CHECK_EVERY_S,
    epochs_spent,
    epochs_trained,
    stop_new_trials,
)
from search.coordination._resilience import retrying

if TYPE_CHECKING:
    from search.coordination._coordinator import Coordinator

OBJECTIVE_ERROR_ATTR = "hpsearch.objective_error"
"""Why a study's trials cannot be scored: an ``--objective`` or ``--constraint`` names a metric its
trials do not record. Set by the first trial that finds it; the study takes no new trial."""


@dataclass
class EarlyStop:
    """Called as the study is followed (about once a second); stops new trials once a limit is met."""

    coordinator: Coordinator
    timeout_s: float | None = None
    target: float | None = None
    maximize: bool = False
    constrained: bool = False
    """Whether the study has ``--constraint``s: only trials that meet them count for ``--stop-at``."""
    epoch_budget: int | None = None
    """``--epoch-budget``, in epochs: no new trial once the study's trials have trained this many."""
    started: float = field(default_factory=time.monotonic)
    stopped: str | None = None
    _next: float = 0.0
    _next_count: float = 0.0
    _next_shown: float = 0.0
    _first: tuple[float, int] | None = None
    _trials: st.StudyTrials | None = None

    def __call__(self) -> None:
        now = time.monotonic()
        if self.stopped is not None:
            return
        reason = None
        if (self.timeout_s is not None or self.target is not None) and now >= self._next:
            self._next = now + CHECK_EVERY_S
            reason = self._reason(now)
        reason = reason or self._epochs_reason(now)
        if reason is not None:
            self.stopped = reason
            retrying(lambda: stop_new_trials(self.coordinator, reason), "stopping new trials")

    def _reason(self, now: float) -> str | None:
        if self.timeout_s is not None and now - self.started >= self.timeout_s:
            return f"--timeout {self.timeout_s:g} s passed"
        if self.target is None:
            return None
        best = best_value(self.coordinator, self.constrained, self.maximize)
        if best is not None and (best >= self.target if self.maximize else best <= self.target):
            return f"--stop-at {self.target:g} reached (best {best:.5g})"
        return None

    def _epochs_reason(self, now: float) -> str | None:
        """Each call (about once a second) while reading the trials changed since is quick; in a large
        study, at most a twentieth of the follower's time."""
        if self.epoch_budget is None or now < self._next_count:
            return None
        if self._trials is None:  # its own copy: a finished trial is read once
            self._trials = st.StudyTrials(self.coordinator.storage, self.coordinator.study_id())
        trials = self._trials.refresh()
        trained = epochs_trained(trials)
        self._next_count = now + 20 * (time.monotonic() - now)
        reached = trained >= self.epoch_budget
        self._show(now, trained, reached, running=sum(t.state.name == "RUNNING" for t in trials))
        return epochs_spent(self.epoch_budget, trained) if reached else None

    def _show(self, now: float, trained: int, reached: bool, running: int) -> None:
        """The count, for ``search status`` and the live view: every 2 s, and when reached."""
        self._first = self._first or (now, trained)
        if now < self._next_shown and not reached:
            return
        self._next_shown = now + CHECK_EVERY_S
        since, before = self._first
        rate = (trained - before) / (now - since) if now > since and trained > before else None
        shown = {"epochs": self.epoch_budget, "trained": trained, "per_second": rate, "at": time.time(),
                 "running": running}  # fmt: skip
        retrying(lambda: self.coordinator.storage.set_study_user_attr(self.coordinator.study_id(), EPOCHS_ATTR, shown),
                 "recording the epochs trained")  # fmt: skip


def best_value(coordinator: Coordinator, constrained: bool = False, maximize: bool = False) -> float | None:
    """The best complete trial's value (of those that meet the constraints), read now; None before one completes."""
    if constrained:
        from optuna.trial import TrialState

        complete = (TrialState.COMPLETE,)
        trials = coordinator.storage.get_all_trials(coordinator.study_id(), deepcopy=False, states=complete)
        values = [t.values[0] for t in trials if t.values and all(c <= 0 for c in t.constraints.values())]
        return (max if maximize else min)(values) if values else None
    try:
        value = coordinator.storage.get_best_trial(coordinator.study_id()).value
    except ValueError:  # no complete trial yet
        return None
    return None if value is None or math.isnan(value) else float(value)


def stop_for_objective_error(coordinator: Coordinator, reason: str) -> None:
    """No new trial: its objectives or constraints name a metric the trials do not record (``reason``)."""
    coordinator.storage.set_study_user_attr(coordinator.study_id(), OBJECTIVE_ERROR_ATTR, reason)
    stop_new_trials(coordinator, reason)


def objective_error(coordinator: Coordinator) -> str | None:
    return coordinator.study_user_attrs().get(OBJECTIVE_ERROR_ATTR)
