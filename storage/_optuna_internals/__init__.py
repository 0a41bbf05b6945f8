"""The one place that reaches into Optuna: its private attributes and modules, and direct writes to its tables.

Everything else in the project goes through Optuna's public API or through these functions
(``tests/test_optuna_boundary.py`` keeps it so). Upgrading Optuna means reading this package
against the new Optuna's source, running ``tests/storage/`` and the search tests, and widening
``SUPPORTED`` below; an Optuna outside it stops the import with one line.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

from storage._errors import StorageError

SUPPORTED = ((5, 0), (6, 0))
"""Optuna versions this package was written and tested for: at least the first, below the second
(constraints.txt pins the one tested)."""


def check_optuna_version(installed: str) -> None:
    """Raise :class:`StorageError` unless ``installed`` (a version string) is in ``SUPPORTED``."""
    low, high = SUPPORTED
    match = re.match(r"(\d+)\.(\d+)", installed)
    if match is None or not low <= (int(match[1]), int(match[2])) < high:
        raise StorageError(
            f"Optuna {installed} is installed; hpsearch supports Optuna >={low[0]}.{low[1]},<{high[0]}.{high[1]}"
            " (pip install -c constraints.txt optuna)"
        )


def _installed() -> str:
    try:
        return version("optuna")
    except PackageNotFoundError:
        return "(none)"


check_optuna_version(_installed())  # the distribution's metadata: Optuna itself is imported only when used

from storage._optuna_internals._access import (  # noqa: E402 - after the check: they are written for those versions
    best_intermediate_value,
    bracket_id,
    cached_frozen_trial,
    cached_study_trials,
    cached_trials,
    constraint_key,
    filter_study,
    hyperband_brackets,
    interval_steps,
    is_first_in_interval_step,
    is_promotable,
    min_early_stopping_rate,
    min_resource,
    pop_waiting_trial_id,
    rdb_models,
    reduction_factor,
    scoped_session,
    set_cached_frozen_trial,
    set_cached_trials,
    set_study_storage,
    share_random_stream,
    study_id,
    study_of_trials,
    study_storage,
    trial_id,
    trial_time_columns,
    warmup_steps,
    wrapped_pruner,
)
from storage._optuna_internals._bound import bind_of, bound_to  # noqa: E402
from storage._optuna_internals._bulk import copy_trials_for_benchmarks  # noqa: E402
from storage._optuna_internals._claim import (  # noqa: E402
    count_up_study_attr,
    create_running_trial,
    pop_waiting_trial,
)
from storage._optuna_internals._indexes import INDEXES, ensure_indexes  # noqa: E402
from storage._optuna_internals._steps import store_steps, system_attrs_query, trial_changes_query  # noqa: E402
from storage._optuna_internals._versions import versions_on_demand  # noqa: E402
from storage._optuna_internals._window import study_seeing  # noqa: E402
from storage._optuna_internals._writes import (  # noqa: E402
    evict_paused,
    finish_trial,
    set_trial_params,
    set_user_attrs,
)

__all__ = [
    "INDEXES",
    "SUPPORTED",
    "bind_of",
    "bound_to",
    "bracket_id",
    "cached_frozen_trial",
    "cached_study_trials",
    "cached_trials",
    "evict_paused",
    "check_optuna_version",
    "constraint_key",
    "ensure_indexes",
    "copy_trials_for_benchmarks",
    "count_up_study_attr",
    "create_running_trial",
    "filter_study",
    "finish_trial",
    "hyperband_brackets",
    "interval_steps",
    "best_intermediate_value",
    "is_first_in_interval_step",
    "is_promotable",
    "min_early_stopping_rate",
    "min_resource",
    "pop_waiting_trial",
    "pop_waiting_trial_id",
    "rdb_models",
    "reduction_factor",
    "scoped_session",
    "set_cached_frozen_trial",
    "set_cached_trials",
    "set_study_storage",
    "set_trial_params",
    "set_user_attrs",
    "share_random_stream",
    "store_steps",
    "study_id",
    "study_of_trials",
    "study_seeing",
    "study_storage",
    "system_attrs_query",
    "trial_changes_query",
    "trial_id",
    "trial_time_columns",
    "versions_on_demand",
    "warmup_steps",
    "wrapped_pruner",
]
