"""Showing a study to people: progress snapshots, the live view, summaries, the report, dashboard and MLflow UI.

Everything here reads the study; the only writes are its own outputs (a page, a summary).
"""

from search.observation._follow import Follower, PlainFollower, make_follower
from search.observation._lr_plot import lr_find_figure
from search.observation._progress import RunningTrial, Snapshot, duration, snapshot, trials_per_minute
from search.observation._report import REPORT_ARTIFACT, ReportResult, write_report
from search.observation._retrain_view import RetrainView
from search.observation._servers import (
    check_port_free,
    dashboard_server,
    experiment_path,
    mlflow_server_env,
    serve_dashboard,
    serve_mlflow,
    serve_model,
)
from search.observation._summary import overhead_stats, print_start_header, study_summary
from search.observation._trials import (
    SortKey,
    TrialRow,
    continued_attempts,
    deployment_text,
    failure_reasons,
    metric_names,
    parse_sort,
    paused_now,
    rows_to_csv,
    rows_to_json,
    sort_rows,
    top_value_rows,
    trial_row,
    trial_rows,
)

__all__ = [
    "REPORT_ARTIFACT",
    "Follower",
    "PlainFollower",
    "ReportResult",
    "RetrainView",
    "RunningTrial",
    "Snapshot",
    "SortKey",
    "TrialRow",
    "check_port_free",
    "continued_attempts",
    "dashboard_server",
    "deployment_text",
    "duration",
    "experiment_path",
    "failure_reasons",
    "lr_find_figure",
    "make_follower",
    "metric_names",
    "mlflow_server_env",
    "overhead_stats",
    "parse_sort",
    "paused_now",
    "print_start_header",
    "rows_to_csv",
    "rows_to_json",
    "serve_dashboard",
    "serve_mlflow",
    "serve_model",
    "snapshot",
    "sort_rows",
    "study_summary",
    "trial_row",
    "top_value_rows",
    "trial_rows",
    "trials_per_minute",
    "write_report",
]
