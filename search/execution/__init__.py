"""Running trials: the worker loop, one trial end to end, multi-process trials, and local worker processes."""

from search.execution._context import ENV_SHARDING, ParentRun, TrialOutcome, WorkerContext
from search.execution._early import ENV_EARLY, await_release, release_workers
from search.execution._finish import fail_reason
from search.execution._gang import Nodes, launch, run_rank
from search.execution._local import (
    check_some_worker_succeeded,
    default_workers,
    parse_gpus,
    reaping,
    report_worker_codes,
    spawn_worker,
    spawn_workers,
    visible_gpus,
    wait_for_workers,
    worker_logs,
)
from search.execution._pruning import PruningHook
from search.execution._slurm import SlurmArray
from search.execution._slurm import submit as submit_array
from search.execution._trial import logical_number, run_trial
from search.execution._watchdog import ENV_STALL_TIMEOUT, EXIT_STALLED
from search.execution._worker import (
    IDLE_POLL_S,
    WorkerReport,
    check_trains_here,
    connect,
    default_worker_id,
    interrupt_running,
    run_worker,
    search_subset,
)

__all__ = [
    "ENV_SHARDING",
    "ENV_STALL_TIMEOUT",
    "EXIT_STALLED",
    "IDLE_POLL_S",
    "PruningHook",
    "SlurmArray",
    "ParentRun",
    "TrialOutcome",
    "WorkerContext",
    "WorkerReport",
    "check_some_worker_succeeded",
    "check_trains_here",
    "connect",
    "default_worker_id",
    "default_workers",
    "fail_reason",
    "interrupt_running",
    "Nodes",
    "launch",
    "logical_number",
    "parse_gpus",
    "reaping",
    "report_worker_codes",
    "run_rank",
    "run_trial",
    "run_worker",
    "search_subset",
    "spawn_worker",
    "ENV_EARLY",
    "await_release",
    "release_workers",
    "spawn_workers",
    "submit_array",
    "visible_gpus",
    "wait_for_workers",
    "worker_logs",
]
