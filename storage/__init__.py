"""Where studies, runs and checkpoints are stored.

The only package that builds database URLs, engines and MLflow tracking URIs. Embedded
defaults (SQLite files under a project directory) need no server; PostgreSQL URLs are pooled
with TCP keepalive and a ping for connections that sat idle. Passwords never appear in what
this package returns as text.
"""

from storage._claim import create_running_trial, pop_waiting_trial
from storage._counts import TrialCounts, count_trials, count_trials_and_attr
from storage._engine import MAX_OVERFLOW, POOL_SIZE, create_engine
from storage._errors import StorageError
from storage._liveness import retried_trial_numbers, retries_of, stale_trials
from storage._lock import DEFAULT_HOLD_S, LockBusy, LockTimeout, check_lock, study_lock
from storage._mlflow import (
    TRACKING_MAX_OVERFLOW,
    TRACKING_POOL_SIZE,
    TrackingLocation,
    bound_tracking_pool,
    prepare_sqlite_tracking,
    resolve_tracking,
)
from storage._optuna import (
    check_connection,
    explain_db_error,
    finish_trial,
    has_optuna_tables,
    open_optuna_storage,
    set_trial_params,
    set_user_attrs,
)
from storage._project import DEFAULT_DIRNAME, check_writable, ensure_project_dir
from storage._steps import store_steps
from storage._trials import StudyTrials, read_trials
from storage._urls import (
    describe,
    is_postgres,
    is_sqlite,
    mask,
    normalize_db_url,
    sqlite_path,
    sqlite_url,
    without_password,
)

__all__ = [
    "DEFAULT_DIRNAME",
    "DEFAULT_HOLD_S",
    "LockBusy",
    "LockTimeout",
    "MAX_OVERFLOW",
    "POOL_SIZE",
    "StorageError",
    "StudyTrials",
    "read_trials",
    "TRACKING_MAX_OVERFLOW",
    "TRACKING_POOL_SIZE",
    "TrialCounts",
    "TrackingLocation",
    "bound_tracking_pool",
    "check_connection",
    "check_lock",
    "check_writable",
    "count_trials",
    "count_trials_and_attr",
    "create_engine",
    "create_running_trial",
    "describe",
    "ensure_project_dir",
    "explain_db_error",
    "finish_trial",
    "has_optuna_tables",
    "is_postgres",
    "is_sqlite",
    "mask",
    "normalize_db_url",
    "open_optuna_storage",
    "pop_waiting_trial",
    "prepare_sqlite_tracking",
    "resolve_tracking",
    "retried_trial_numbers",
    "retries_of",
    "set_trial_params",
    "set_user_attrs",
    "sqlite_path",
    "sqlite_url",
    "stale_trials",
    "store_steps",
    "study_lock",
    "without_password",
]
