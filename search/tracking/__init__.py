"""MLflow: the study's parent run, a run per trial, and the retrained best model in the registry."""

from search.tracking._parent import open_parent_run, record_on_parent
from search.tracking._retrain import CHAMPION, RetrainResult, export_model, pick_trial, retrain_and_register
from search.tracking._tracker import ROLE_TAG, STATE_TAG, RunLogger, Tracker

__all__ = [
    "CHAMPION",
    "ROLE_TAG",
    "STATE_TAG",
    "RetrainResult",
    "RunLogger",
    "Tracker",
    "export_model",
    "open_parent_run",
    "pick_trial",
    "record_on_parent",
    "retrain_and_register",
]
