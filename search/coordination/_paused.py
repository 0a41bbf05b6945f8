"""Freeze-thaw in the claim: which paused trial a worker asking for work resumes, and taking it.

A paused trial is a PRUNED attempt with ``paused_at`` and its checkpoint kept (``search.execution``
pauses it; ``search.settings._freeze_thaw`` is the rule). Resuming it queues its continuation as a
retry is queued, and takes it, under the study lock that a claim holds. ``coordinator`` is the
claiming :class:`search.coordination.Coordinator` (not imported: it imports this module).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import storage as st
from search.coordination._attrs import STOPPED_ATTR
from search.coordination._reaper import RetryDeadTrial
from search.coordination._resilience import retrying
from search.settings import PAUSED_AT_ATTR, pausing_spec

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial
    from sqlalchemy.engine import Connection

log = logging.getLogger(__name__)


def resume_paused(coordinator: Any, study: optuna.Study, conn: Connection | None, *, spent: bool) -> int | None:
    """Under the study lock, with a pruner that pauses (freeze-thaw): queue and take the
    continuation of the paused trial its rule resumes now, if any (``spent``: the budget's trials
    have all started); its id.

    The continuation is queued as a retry is (the same logical trial, its params and values, its
    attempt last in ``retry_history``), spending none of ``--max-retries``, and names the
    attempt it resumes in ``resumed_from``; it goes on from the checkpoint kept at the pause.
    """
    found = resumable(coordinator, study, conn, spent=spent)
    if found is None:
        return None
    paused_id, at = found
    frozen = coordinator.storage.get_trial(paused_id)
    attrs = {k: v for k in ("mlflow_run_id",) if (v := frozen.user_attrs.get(k)) is not None}
    attrs["resumed_from"] = frozen.number
    if queue_continuation(coordinator.storage, study, frozen, attrs) is None:
        return None
    log.info("resuming trial %d from epoch %d (paused as trial %d)", frozen.system_attrs.get(
        "failed_trial", frozen.number), at, frozen.number)  # fmt: skip
    return pop_retry(coordinator, conn, st.study_id(study))  # queued as a retry is: not a grid point


def pop_retry(coordinator: Any, conn: Connection | None, study_id: int) -> int | None:
    """The study's oldest queued retry or continuation turned RUNNING (never a queued new trial); its
    id. On the lock's connection on PostgreSQL; on SQLite in a transaction of its own, under the
    study's file lock."""
    if conn is not None:
        return st.pop_waiting_trial(conn, study_id, retries_only=True)
    with coordinator.storage.engine.begin() as own:
        return st.pop_waiting_trial(own, study_id, retries_only=True)


def resumable(coordinator: Any, study: optuna.Study, conn: Connection | None = None, *,
              spent: bool) -> tuple[int, int] | None:  # fmt: skip
    """The paused attempt (its id and epoch) that its pruner's rule resumes now, if the study's
    pruner pauses; None if it does not, or no paused trial has earned it (or can resume here), or
    the search ended early (``--timeout``, ``--stop-at``, ``--epoch-budget``: the paused trials then
    end as at the end of a study). ``spent``: the budget's trials have all started, so the best
    paused trial of each rung has earned its resumption (``_freeze_thaw.to_resume``)."""
    spec = pausing_spec(study.pruner)
    if spec is None:
        return None
    bind = conn or coordinator.storage.engine
    paused = {n: p for n, p in st.paused_trials(bind, st.study_id(study), PAUSED_AT_ATTR).items()
              if coordinator.can_resume(n)}  # fmt: skip
    if not paused:
        return None
    values = st.values_at(bind, st.study_id(study), sorted({at for _, at in paused.values()}))
    maximize = study.direction.name == "MAXIMIZE"
    number = spec.to_resume(study.pruner, values, {n: at for n, (_, at) in paused.items()}, maximize, spent)
    # Ended early: no paused trial starts again (looked at last: a claim under the lock pays it only then).
    if number is None or st.study_attrs(bind, st.study_id(study), STOPPED_ATTR):
        return None
    return paused[number]


def study_finished(coordinator: Any, study: optuna.Study | None = None) -> bool:
    """Every logical trial of the budget has finished, none runs or waits, and no paused trial has
    earned its resumption (a worker is about to take it: the last trial to pause may have made it so)."""
    if not coordinator.counts().done(coordinator.budget()):
        return False
    study = study or coordinator.load()
    return retrying(lambda: resumable(coordinator, study, spent=True), "looking for paused trials") is None


def queue_continuation(
    storage: Any, study: optuna.Study, attempt: FrozenTrial, user_attrs: dict[str, Any]
) -> int | None:
    """Queue the continuation of ``attempt``'s logical trial (a paused trial's resumption, a replaced
    trial's copy), as a retry is queued but spending none of ``--max-retries``; its id, or None
    when the attempt has a continuation already."""
    callback = storage.heartbeat_stale_trial_callback
    queue = callback if isinstance(callback, RetryDeadTrial) else RetryDeadTrial(storage, 10**9)
    return queue.queue(study, attempt, free=True, user_attrs=user_attrs)
