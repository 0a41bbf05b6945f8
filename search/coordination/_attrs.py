"""The study user attributes hpsearch keeps beside Optuna's own (the names, in one place)."""

from search.settings._freeze_thaw import BUDGET_ATTR as BUDGET_ATTR  # the freeze-thaw rule reads them too
from search.settings._freeze_thaw import STOPPED_ATTR as STOPPED_ATTR

SPEC_ATTR = "hpsearch.spec"
EPOCHS_ATTR = "hpsearch.epoch_budget"
"""This run's ``--epoch-budget`` and the epochs last counted (by its follower, ``_stopping.py``, or by the claim
that found it spent, ``_no_new_trials.py``); cleared on resume."""
PARENT_RUN_ATTR = "hpsearch.mlflow_parent_run_id"
EXPERIMENT_ATTR = "hpsearch.mlflow_experiment_id"
WORKERS_ATTR = "hpsearch.workers_joined"
CHECKPOINT_ROOTS_ATTR = "hpsearch.checkpoint_roots"
"""The checkpoint roots each ``search start`` and ``search worker`` ran the study with: where ``search delete``
looks."""
