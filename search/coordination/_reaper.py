"""Dead trials: find the ones whose worker stopped heartbeating, fail them, queue their retry.

Any live process of a study reaps: a worker when it claims a trial and, while it trains, from its
heartbeat thread; the process following the study (``search start``) whenever it looks. Reaping
is idempotent, so a reaper that dies or loses the database half-way leaves nothing to repair: the
retry is queued before the dead trial is failed, and never queued twice for one dead attempt.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import storage as st
from search.coordination._resilience import OUTAGE

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    import optuna
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial
    from sqlalchemy.engine import Connection

    StudyLock = AbstractContextManager[Connection | None]

log = logging.getLogger(__name__)

FAIL_REASON_ATTR = "fail_reason"
FREE_RETRIES_ATTR = "free_retries"
"""System attribute: the attempts of a logical trial whose retry spent none of ``--max-retries``."""
INTERRUPTED = "interrupted"
"""The ``fail_reason`` of a trial its own worker stopped (Ctrl-C, SIGTERM): it resumes later."""
_ATTEMPT_ONLY = (FAIL_REASON_ATTR, "resumed_from")
"""An attempt's user attributes a retry of it does not take over: its failure, and the paused or
replaced attempt it continued (each continuation is counted once: ``storage.TrialCounts.resumed``)."""
ORPHAN_SLACK_S = 60.0
"""Extra wait before a trial that never heartbeat counts as dead (start times are node clocks)."""


class RetryDeadTrial:
    """Queue a WAITING copy of a dead trial: same params, its reported values and user attributes.

    Like Optuna's ``RetryHeartbeatStaleTrialCallback(max_retry, inherit_intermediate_values=True)``
    (the same system attributes, so a retry continues the same logical trial), but a dead attempt
    that already has a retry is not retried again, and :meth:`queue` returns the new trial's id.
    """

    def __init__(self, storage: RDBStorage, max_retry: int) -> None:
        self.storage = storage
        self.max_retry = max_retry

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.queue(study, trial)

    def queue(self, study: optuna.Study, trial: FrozenTrial, free: bool = False,
              user_attrs: dict[str, Any] | None = None) -> int | None:  # fmt: skip
        """Queue the retry of ``trial``; its id, or None when it has one already or no retries are left.

        A ``free`` retry (its attempt failed of the worker's machine: a full disk; or it is a paused
        trial's resumption) is not counted against ``max_retry``; the attempts it follows are listed
        in ``free_retries``. ``user_attrs``: the retry's, instead of the attempt's (but ``fail_reason``).
        """
        import optuna

        history = [*trial.system_attrs.get("retry_history", []), trial.number]
        frees = [*trial.system_attrs.get(FREE_RETRIES_ATTR, []), *([trial.number] if free else [])]
        if len(history) - len(frees) > self.max_retry:
            return None
        if trial.number in st.retried_trial_numbers(st.bind_of(self.storage), st.study_id(study)):
            return None
        system_attrs = {**trial.system_attrs, "failed_trial": trial.system_attrs.get("failed_trial", trial.number),
                        "retry_history": history, FREE_RETRIES_ATTR: frees}  # fmt: skip
        # The retry starts clean: the attempt's failure is the attempt's, not the retry's.
        if user_attrs is None:  # what the attempt was, not what it did: which attempt it resumed is its own
            user_attrs = {key: value for key, value in trial.user_attrs.items() if key not in _ATTEMPT_ONLY}
        template = optuna.trial.create_trial(
            state=optuna.trial.TrialState.WAITING, params=trial.params, distributions=trial.distributions,
            user_attrs=user_attrs, system_attrs=system_attrs, intermediate_values=trial.intermediate_values,
        )  # fmt: skip
        retry_id = self.storage.create_new_trial(st.study_id(study), template_trial=template)
        # Two processes that fail the same attempt at once (a reaper and the worker's own Ctrl-C)
        # can both get past the look above: the older retry stays, a younger one stands down.
        first = min(st.retries_of(st.bind_of(self.storage), st.study_id(study), trial.number), default=retry_id)
        if first != retry_id:
            self.storage.set_trial_user_attr(
                retry_id, FAIL_REASON_ATTR, f"not needed: trial {trial.number} has a retry"
            )
            self.storage.set_trial_state_values(retry_id, state=optuna.trial.TrialState.FAIL)
            return None
        return retry_id


def reap_dead_trials(storage: RDBStorage, study: optuna.Study, lock: Callable[[bool], StudyLock],
                     wait: bool = True) -> list[FrozenTrial]:  # fmt: skip
    """Fail the study's dead trials and queue their retries; return the trials this call failed.

    The study lock (``lock(wait)``) is taken only when a cheap look finds a dead trial. Under the
    lock a claim never sees a dead trial failed but its retry not yet queued. With ``wait=False``
    a lock held elsewhere skips this pass: a heartbeat thread never waits for the study lock.
    """
    interval = storage.get_heartbeat_interval()
    if not interval:
        return []
    grace = float(storage.grace_period or 2 * interval)

    def find() -> list[int]:
        return st.stale_trials(st.bind_of(storage), st.study_id(study), grace, grace + ORPHAN_SLACK_S)

    # During an outage find() fails; right after one every heartbeat is old, so live workers get
    # one grace period to beat again before anything counts as dead.
    if not find() or OUTAGE.within(grace):
        return []
    dead: list[tuple[FrozenTrial, bool] | None] = []
    try:
        with lock(wait) as conn:
            for trial_id in find():
                # A reaper that froze in here may have lost the lock to another: it stops writing
                # (a lost connection, retried like any other) rather than fail a trial twice.
                st.check_lock(conn)
                dead.append(fail_and_retry(storage, study, trial_id, f"worker lost: no heartbeat for over {grace:g} s"))
    except st.LockBusy:
        return []  # someone else is claiming or reaping; the next pass looks again
    failed = [found for found in dead if found is not None]
    for trial, queued in failed:
        retry = "queued its retry" if queued else "no retries left"
        worker = trial.user_attrs.get("worker", "?")
        log.warning("trial %d failed: its worker %s stopped heartbeating; %s", trial.number, worker, retry)
    return [trial for trial, _ in failed]


def fail_and_retry(storage: RDBStorage, study: optuna.Study, trial_id: int, reason: str,
                   free: bool = False) -> tuple[FrozenTrial, bool] | None:  # fmt: skip
    """Queue the retry of a RUNNING trial, then fail it with ``reason`` (under the study lock).

    Returns the trial as read while it still ran and whether a retry was queued (none when its
    retries are spent; a ``free`` retry spends none), or None, leaving no retry, when it had
    finished (its worker's tell landed first). Used by reapers, by a worker's stall watchdog, by its
    interrupt (Ctrl-C, SIGTERM) and when its machine fails (a full disk).
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    trial = storage.get_trial(trial_id)
    if trial.state != TrialState.RUNNING:
        return None
    callback = storage.heartbeat_stale_trial_callback
    retry_id = callback.queue(study, trial, free) if isinstance(callback, RetryDeadTrial) else None
    try:
        # Either write finds the trial finished when its worker's tell landed after our read.
        storage.set_trial_user_attr(trial_id, FAIL_REASON_ATTR, reason)
        storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
    except UpdateFinishedTrialError:
        # Its worker finished it after all, between our look and now: the retry is not needed,
        # unless the worker failed it itself (an interrupt, which then found our retry queued).
        if retry_id is not None and storage.get_trial(trial_id).user_attrs.get(FAIL_REASON_ATTR) != INTERRUPTED:
            storage.set_trial_user_attr(retry_id, FAIL_REASON_ATTR, f"not needed: trial {trial.number} finished")
            storage.set_trial_state_values(retry_id, state=TrialState.FAIL)
        return None
    return trial, retry_id is not None
