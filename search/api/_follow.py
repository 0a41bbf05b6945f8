"""Following a study until it is done: what ``search start`` does once its workers are running."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from search.coordination import study_finished

if TYPE_CHECKING:
    from search.coordination import Coordinator

log = logging.getLogger(__name__)

NOBODY_S = 10.0
"""How long a study without a running trial counts as trained by nobody (an idle worker elsewhere
claims a queued trial within seconds)."""


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
