"""Running trials: the worker loop, one trial end to end, multi-process trials, and local worker processes.

Imports here stay light: ``search start`` starts its workers (:func:`spawn_early`, the
:mod:`~search.execution._machine` helpers) before it imports SQLAlchemy, Optuna or the study, so
each name loads its module on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from search.execution._context import ENV_SHARDING, ParentRun, TrialOutcome, WorkerContext
    from search.execution._early import (
        ENV_EARLY,
        await_release,
        release_workers,
        spawn_early,
        start_at_once,
        start_rest,
    )
    from search.execution._finish import fail_reason
    from search.execution._gang import Nodes, launch, run_rank
    from search.execution._local import (
        check_some_worker_succeeded,
        reaping,
        report_worker_codes,
        spawn_worker,
        spawn_workers,
        wait_for_workers,
    )
    from search.execution._machine import (
        check_gpus_to_share,
        check_sharing,
        default_workers,
        memory_fraction,
        parse_gpus,
        schema_checked,
        visible_gpus,
        worker_logs,
    )
    from search.execution._paused_disk import folder_bytes
    from search.execution._pruning import PruningHook
    from search.execution._restarts import Restarts
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

_LAZY = {
    "ENV_EARLY": ("search.execution._early", "ENV_EARLY"),
    "ENV_SHARDING": ("search.execution._context", "ENV_SHARDING"),
    "ENV_STALL_TIMEOUT": ("search.execution._watchdog", "ENV_STALL_TIMEOUT"),
    "EXIT_STALLED": ("search.execution._watchdog", "EXIT_STALLED"),
    "IDLE_POLL_S": ("search.execution._worker", "IDLE_POLL_S"),
    "Nodes": ("search.execution._gang", "Nodes"),
    "ParentRun": ("search.execution._context", "ParentRun"),
    "PruningHook": ("search.execution._pruning", "PruningHook"),
    "Restarts": ("search.execution._restarts", "Restarts"),
    "SlurmArray": ("search.execution._slurm", "SlurmArray"),
    "TrialOutcome": ("search.execution._context", "TrialOutcome"),
    "WorkerContext": ("search.execution._context", "WorkerContext"),
    "WorkerReport": ("search.execution._worker", "WorkerReport"),
    "await_release": ("search.execution._early", "await_release"),
    "check_gpus_to_share": ("search.execution._machine", "check_gpus_to_share"),
    "check_sharing": ("search.execution._machine", "check_sharing"),
    "check_some_worker_succeeded": ("search.execution._local", "check_some_worker_succeeded"),
    "check_trains_here": ("search.execution._worker", "check_trains_here"),
    "connect": ("search.execution._worker", "connect"),
    "default_worker_id": ("search.execution._worker", "default_worker_id"),
    "default_workers": ("search.execution._machine", "default_workers"),
    "fail_reason": ("search.execution._finish", "fail_reason"),
    "folder_bytes": ("search.execution._paused_disk", "folder_bytes"),
    "memory_fraction": ("search.execution._machine", "memory_fraction"),
    "interrupt_running": ("search.execution._worker", "interrupt_running"),
    "launch": ("search.execution._gang", "launch"),
    "logical_number": ("search.execution._trial", "logical_number"),
    "parse_gpus": ("search.execution._machine", "parse_gpus"),
    "reaping": ("search.execution._local", "reaping"),
    "release_workers": ("search.execution._early", "release_workers"),
    "report_worker_codes": ("search.execution._local", "report_worker_codes"),
    "run_rank": ("search.execution._gang", "run_rank"),
    "run_trial": ("search.execution._trial", "run_trial"),
    "run_worker": ("search.execution._worker", "run_worker"),
    "schema_checked": ("search.execution._machine", "schema_checked"),
    "search_subset": ("search.execution._worker", "search_subset"),
    "spawn_early": ("search.execution._early", "spawn_early"),
    "spawn_worker": ("search.execution._local", "spawn_worker"),
    "spawn_workers": ("search.execution._local", "spawn_workers"),
    "start_at_once": ("search.execution._early", "start_at_once"),
    "start_rest": ("search.execution._early", "start_rest"),
    "submit_array": ("search.execution._slurm", "submit"),
    "visible_gpus": ("search.execution._machine", "visible_gpus"),
    "wait_for_workers": ("search.execution._local", "wait_for_workers"),
    "worker_logs": ("search.execution._machine", "worker_logs"),
}

__all__ = [
    "ENV_EARLY",
    "ENV_SHARDING",
    "ENV_STALL_TIMEOUT",
    "EXIT_STALLED",
    "IDLE_POLL_S",
    "Nodes",
    "ParentRun",
    "PruningHook",
    "Restarts",
    "SlurmArray",
    "TrialOutcome",
    "WorkerContext",
    "WorkerReport",
    "await_release",
    "check_gpus_to_share",
    "check_sharing",
    "check_some_worker_succeeded",
    "check_trains_here",
    "connect",
    "default_worker_id",
    "default_workers",
    "fail_reason",
    "folder_bytes",
    "interrupt_running",
    "launch",
    "logical_number",
    "memory_fraction",
    "parse_gpus",
    "reaping",
    "release_workers",
    "report_worker_codes",
    "run_rank",
    "run_trial",
    "run_worker",
    "schema_checked",
    "search_subset",
    "spawn_early",
    "spawn_worker",
    "spawn_workers",
    "start_at_once",
    "start_rest",
    "submit_array",
    "visible_gpus",
    "wait_for_workers",
    "worker_logs",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
