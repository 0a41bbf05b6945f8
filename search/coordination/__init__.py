"""The study in its storage: the study record, claims within an exact budget, liveness and reaping, outages."""

from search.coordination._attrs import (
    BUDGET_ATTR,
    EPOCHS_ATTR,
    EXPERIMENT_ATTR,
    PARENT_RUN_ATTR,
    SPEC_ATTR,
    STOPPED_ATTR,
    WORKERS_ATTR,
)
from search.coordination._coordinator import Coordinator
from search.coordination._liveness import heartbeat, keep_alive
from search.coordination._no_new_trials import epochs_trained, near_epoch_budget, stop_new_trials
from search.coordination._paused import queue_continuation, resumable, study_finished
from search.coordination._reaper import (
    FAIL_REASON_ATTR,
    INTERRUPTED,
    RetryDeadTrial,
    fail_and_retry,
    reap_dead_trials,
)
from search.coordination._resilience import (
    ENV_OUTAGE_LIMIT,
    OUTAGE,
    TRACKING_OUTAGE,
    attempt,
    is_connection_error,
    outage_limit,
    resilient,
    retrying,
    set_outage_limit,
)
from search.coordination._stopping import (
    EarlyStop,
    best_value,
    objective_error,
    stop_for_objective_error,
)

__all__ = [
    "BUDGET_ATTR",
    "EPOCHS_ATTR",
    "ENV_OUTAGE_LIMIT",
    "EXPERIMENT_ATTR",
    "FAIL_REASON_ATTR",
    "INTERRUPTED",
    "OUTAGE",
    "TRACKING_OUTAGE",
    "PARENT_RUN_ATTR",
    "SPEC_ATTR",
    "STOPPED_ATTR",
    "EarlyStop",
    "best_value",
    "epochs_trained",
    "near_epoch_budget",
    "objective_error",
    "stop_for_objective_error",
    "stop_new_trials",
    "study_finished",
    "queue_continuation",
    "resumable",
    "WORKERS_ATTR",
    "Coordinator",
    "RetryDeadTrial",
    "attempt",
    "fail_and_retry",
    "heartbeat",
    "is_connection_error",
    "keep_alive",
    "outage_limit",
    "reap_dead_trials",
    "resilient",
    "retrying",
    "set_outage_limit",
]
