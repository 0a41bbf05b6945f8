"""No new trial: an early stop under the study lock, and an ``--epoch-budget``'s count near its end.

What a claim (:class:`search.coordination.Coordinator`, not imported: it imports this module) and
the command's follower (``_stopping.EarlyStop``) share. Stopping new trials lowers the budget to the
logical trials claimed so far, under the study lock, so a claim racing the stop either made it in
or finds the budget spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from search.coordination._attrs import BUDGET_ATTR, EPOCHS_ATTR, STOPPED_ATTR
from search.coordination._interrupts import interrupts_deferred
from search.coordination._resilience import retrying

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from storage import StudyTrials

CHECK_EVERY_S = 2.0
"""How often the follower checks ``--timeout`` and ``--stop-at``, and shows its epoch count."""


def epochs_spent(budget: int, trained: int) -> str:
    return f"--epoch-budget {budget} epochs trained ({trained} so far)"


def near_epoch_budget(shown: dict[str, Any] | None, trial_epochs: int) -> bool:
    """Whether a new trial might train past this run's ``--epoch-budget``, by the follower's last count
    (``shown``, its ``EPOCHS_ATTR`` record; None: no epoch budget): that count, its rate since, the
    trials it saw running and one trial's epochs (``trial_epochs``) reach the budget. Then a claim
    counts the epochs itself before it takes a paused or new trial (:func:`epoch_budget_spent`): the
    follower counts about once a second, and a worker that has just finished the trial crossing the
    budget would claim one more meanwhile. Far from it, the claim pays nothing: it reads the record
    with its counts."""
    if not shown or shown.get("epochs") is None:
        return False
    budget, trained = int(shown["epochs"]), int(shown.get("trained") or 0)
    if trained >= budget:  # the follower found it spent (and is stopping new trials)
        return True
    age = max(0.0, time.time() - float(shown.get("at") or 0.0))  # unknown: as old as can be
    rate = shown.get("per_second")
    ahead = math.inf if rate is None else float(rate) * (age + 2 * CHECK_EVERY_S)
    return trained + ahead + (int(shown.get("running") or 0) + 1) * trial_epochs >= budget


def epoch_budget_spent(coordinator: Any, trials: StudyTrials | None, shown: dict[str, Any]) -> bool:
    """Near the end of an ``--epoch-budget`` (:func:`near_epoch_budget`): whether it is spent, counted
    now from the trials changed since the worker's last read (``trials``, its copy) or all of them; if
    so, no new trial (as the follower would do a moment later), and the count it found is shown (the
    command may end before the follower counts again: ``search status`` reads it)."""
    budget, trained = int(shown["epochs"]), int(shown.get("trained") or 0)
    study_id = coordinator.study_id()
    if trained < budget:  # the follower's count, unless it already found the budget spent

        def count() -> int:
            read = coordinator.storage.get_all_trials(study_id, deepcopy=False) if trials is None else trials.refresh()
            return epochs_trained(read)

        trained = retrying(count, "counting the epochs trained")
        if trained < budget:
            return False
        counted = {**shown, "trained": trained, "at": time.time()}
        retrying(lambda: coordinator.storage.set_study_user_attr(study_id, EPOCHS_ATTR, counted),
                 "recording the epochs trained")  # fmt: skip
    retrying(lambda: stop_new_trials(coordinator, epochs_spent(budget, trained)), "stopping new trials")
    return True


def epochs_trained(trials: Iterable[FrozenTrial]) -> int:
    """The epochs the study's attempts trained, each counted once: the epochs an attempt reported
    less those it took over with the attempt it continues (the last of its ``retry_history``: a
    retry or a paused trial's resumption has that attempt's reports; a replaced trial's copy in
    population-based training, its parent's up to ``pbt_epoch``). Epochs a retry trains again after
    its checkpoint are not counted twice; a queued attempt has trained none."""
    trials = list(trials)
    reported = {t.number: len(t.intermediate_values) for t in trials}
    total = 0
    for t in trials:
        if "pbt_epoch" in t.user_attrs and "resumed_from" in t.user_attrs:  # a copy (its retries drop resumed_from)
            inherited = sum(1 for step in t.intermediate_values if step <= int(t.user_attrs["pbt_epoch"]))
        else:
            history = t.system_attrs.get("retry_history") or []
            inherited = reported.get(int(history[-1]), 0) if history else 0
        total += max(0, len(t.intermediate_values) - inherited)
    return total


def stop_new_trials(coordinator: Any, reason: str) -> dict[str, Any]:
    """Lower the budget to the logical trials started so far and record why, under the study lock;
    once only (the record of the first stop, if the study already took no new trial). Queued trials
    no worker has taken (grid points, ``--enqueue``'s) stay queued for the next run; a Ctrl-C waits
    for both writes."""
    study_id = coordinator.study_id()
    with interrupts_deferred(), coordinator.lock():  # held back until the lock's transaction commits
        if stopped := coordinator.study_user_attrs().get(STOPPED_ATTR):  # by a worker, or the follower: the first says
            return stopped
        claimed, asked = coordinator.counts().started, coordinator.budget()
        record = {"reason": reason, "asked": asked, "claimed": claimed}
        coordinator.storage.set_study_user_attr(study_id, STOPPED_ATTR, record)
        coordinator.storage.set_study_user_attr(study_id, BUDGET_ATTR, min(claimed, asked))
    return record
