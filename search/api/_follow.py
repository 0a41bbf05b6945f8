"""Following a study until it is done: what ``search start`` does once its workers are running."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from search.coordination import resumable, study_finished

if TYPE_CHECKING:
    from search.coordination import Coordinator, EarlyStop

log = logging.getLogger(__name__)

NOBODY_S = 10.0
"""How long a study without a running trial counts as trained by nobody (an idle worker elsewhere
claims a queued trial within seconds)."""


class Stopping:
    """The follower, checking ``--timeout``, ``--stop-at`` and ``--epoch-budget`` each time it is called."""

    def __init__(self, stop: EarlyStop, follower: Any) -> None:
        self.stop, self.follower = stop, follower

    def __call__(self) -> None:
        self.stop()
        self.follower()

    def close(self) -> None:
        self.follower.close()


def follow_until_done(coordinator: Coordinator, follower: Any, poll: float = 2.0,
                      idle_limit: float | None = None) -> bool:  # fmt: skip
    """Follow the study (reaping dead trials) until every logical trial of the budget has finished:
    True. With ``idle_limit``, False once no trial has been running for that many seconds."""
    study = coordinator.load()
    busy = time.monotonic()
    while True:
        coordinator.reap(study)
        counts = coordinator.counts()
        follower()
        if counts.done(coordinator.budget()):
            if study_finished(coordinator, study):
                return True
            # Freeze-thaw: a paused trial has earned its resumption and no trial runs. A worker takes
            # it within a poll; if none has for NOBODY_S, none can (its checkpoint is nowhere a worker
            # looks): the trial ends as it is.
            if time.monotonic() - busy >= NOBODY_S:
                log.warning(
                    "a paused trial earned its resumption but no worker resumed it in %g s (its "
                    "checkpoint is not where a worker looks); the study ends without it",
                    NOBODY_S,
                )
                return True
        if counts.state("RUNNING") > 0:
            busy = time.monotonic()
        elif idle_limit is not None and time.monotonic() - busy >= idle_limit:
            return False
        time.sleep(poll)


def follow_view(coordinator: Coordinator, follower: Any, interval: float = 1.0,
                nobody_s: float | None = None) -> str | None:  # fmt: skip
    """What ``search follow`` does: show the study until every logical trial of the budget has
    finished (None), only reading it. Freeze-thaw: when everything has finished but a paused trial
    that has earned its resumption, and no worker has taken it for ``nobody_s`` seconds (default
    :data:`NOBODY_S`), no worker is left to (``search start`` was stopped, or none sees its
    checkpoint): the line that says so, instead of waiting forever.

    Example:
        >>> coordinator = Coordinator.existing(url, "resmlp-1")  # doctest: +SKIP
        >>> follow_view(coordinator, PlainFollower(coordinator))  # doctest: +SKIP
    """
    nobody_s = NOBODY_S if nobody_s is None else nobody_s
    idle_since: float | None = None
    while True:
        follower()
        counts = coordinator.counts()
        if not counts.done(coordinator.budget()):
            idle_since = None
        elif study_finished(coordinator):
            return None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= nobody_s:
            return _unresumed(coordinator, nobody_s)
        time.sleep(interval)


def _unresumed(coordinator: Coordinator, waited: float) -> str:
    found = resumable(coordinator, coordinator.load(), spent=True)
    trial = "a paused trial"
    if found is not None:
        trial = f"trial {_logical(coordinator, found[0])} (paused at epoch {found[1]})"
    return (f"{trial} has earned its resumption, but no worker has taken it in {waited:g} s: no worker runs study "
            f"{coordinator.study_name!r} (or none sees its checkpoint); `search worker --name "
            f"{coordinator.study_name}` resumes it")  # fmt: skip


def _logical(coordinator: Coordinator, trial_id: int) -> int:
    frozen = coordinator.storage.get_trial(trial_id)
    return int(frozen.system_attrs.get("failed_trial", frozen.number))
