"""MLflow: the study's parent run, a run per trial, and the retrained best model in the registry."""

from search.tracking._deployment import DEPLOYMENT_METRICS, deployment_metrics
from search.tracking._parent import open_parent_run, record_on_parent
from search.tracking._portable import FORMATS, ExportCheck, download_portable, log_portable
from search.tracking._profile import ProfileResult, profile_trial
from search.tracking._quantize import DEFAULT_TOLERANCE, Measurement, QuantizeReport, measure_quantized
from search.tracking._registry import (
    Champion,
    StudyRuns,
    delete_study_runs,
    find_study_runs,
    model_versions,
    read_champion,
    retrained_version,
    serving_example,
)
from search.tracking._retrain import (
    CHAMPION,
    RetrainProgress,
    RetrainResult,
    export_model,
    pick_trial,
    retrain_and_register,
)
from search.tracking._runlog import RunLogger, RunStartError, import_mlflow
from search.tracking._tracker import ROLE_TAG, STATE_TAG, Tracker

__all__ = [
    "CHAMPION",
    "DEFAULT_TOLERANCE",
    "Champion",
    "DEPLOYMENT_METRICS",
    "FORMATS",
    "ExportCheck",
    "Measurement",
    "ProfileResult",
    "QuantizeReport",
    "ROLE_TAG",
    "STATE_TAG",
    "RetrainResult",
    "RunLogger",
    "RunStartError",
    "StudyRuns",
    "Tracker",
    "delete_study_runs",
    "deployment_metrics",
    "download_portable",
    "export_model",
    "find_study_runs",
    "import_mlflow",
    "log_portable",
    "measure_quantized",
    "model_versions",
    "open_parent_run",
    "pick_trial",
    "profile_trial",
    "read_champion",
    "record_on_parent",
    "retrain_and_register",
    "retrained_version",
    "serving_example",
    "RetrainProgress",
]
