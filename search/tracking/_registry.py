"""Reading the champion back from MLflow's registry, and removing a study's runs."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from search.coordination import EXPERIMENT_ATTR, PARENT_RUN_ATTR
from search.tracking._deployment import DEPLOYMENT_METRICS
from search.tracking._retrain import CHAMPION

if TYPE_CHECKING:
    from search.coordination import Coordinator
    from search.tracking._tracker import Tracker

_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
_PAGE = 5000
"""Runs per search request while listing a study's runs."""


@dataclass(frozen=True)
class Champion:
    model_name: str
    version: str
    run_id: str
    source_trial: int | None
    """The study trial whose params were retrained into this version."""
    test_metrics: dict[str, float] = field(default_factory=dict)
    exports: dict[str, str] = field(default_factory=dict)
    """``onnx``/``torchscript``: ``ok`` or why there is no file."""
    deployment: dict[str, float] = field(default_factory=dict)
    """Its deployment metrics as the retrain measured them (``params``, ``latency_ms``, ...)."""


def read_champion(tracker: Tracker, model_name: str) -> Champion | None:
    """The version the ``champion`` alias points at, with its test metrics; None when there is none."""
    from mlflow.exceptions import MlflowException

    client = tracker.client
    try:
        version = client.get_model_version_by_alias(model_name, CHAMPION)
    except MlflowException:
        return None
    run = client.get_run(str(version.run_id))
    source = run.data.tags.get("hpsearch.source_trial")
    return Champion(
        model_name, str(version.version), str(version.run_id), int(source) if source is not None else None,
        {k: v for k, v in run.data.metrics.items() if k.startswith("test_")},
        {k.removeprefix("hpsearch.export."): v for k, v in run.data.tags.items() if k.startswith("hpsearch.export.")},
        {k: run.data.metrics[k] for k in DEPLOYMENT_METRICS if k in run.data.metrics},
    )  # fmt: skip


def retrained_version(tracker: Tracker, coordinator: Coordinator) -> str | None:
    """The model version the study's newest finished retrain registered; None if it has none yet."""
    attrs = coordinator.load().user_attrs
    experiment_id, parent = attrs.get(EXPERIMENT_ATTR), attrs.get(PARENT_RUN_ATTR)
    if not experiment_id or not parent:
        return None
    runs = tracker.client.search_runs(
        [str(experiment_id)], f"tags.`mlflow.parentRunId` = '{parent}' AND tags.retrain = 'true' "
        "AND attributes.status = 'FINISHED'", max_results=1, order_by=["attributes.start_time DESC"],
    )  # fmt: skip
    return runs[0].data.tags.get("hpsearch.model_version") if runs else None


def model_versions(tracker: Tracker, model_name: str) -> int:
    """How many versions the registry holds under ``model_name`` (0 when there is no such model)."""
    from mlflow.exceptions import MlflowException

    try:
        return len(tracker.client.search_model_versions(f"name = '{model_name}'"))
    except MlflowException:
        return 0


@dataclass(frozen=True)
class StudyRuns:
    """A study's MLflow runs: its parent run and every run under it (trials, their retries, retrains)."""

    experiment_id: str | None
    run_ids: tuple[str, ...] = ()
    shared: bool = False
    """The experiment also holds runs that are not this study's (a study of the same name in another
    storage writes to the same experiment): only this study's runs may go, not the experiment."""


def find_study_runs(tracker: Tracker, coordinator: Coordinator) -> StudyRuns:
    """The study's active runs, found from the experiment and parent run the study recorded."""
    attrs = coordinator.load().user_attrs
    experiment_id, parent = attrs.get(EXPERIMENT_ATTR), attrs.get(PARENT_RUN_ATTR)
    if not experiment_id or not parent:
        return StudyRuns(str(experiment_id) if experiment_id else None)
    experiment_id, parent = str(experiment_id), str(parent)
    everything = _run_ids(tracker, experiment_id, None)
    ours = [parent] if parent in everything else []
    ours += _run_ids(tracker, experiment_id, f"tags.`mlflow.parentRunId` = '{parent}'")
    return StudyRuns(experiment_id, tuple(ours), shared=not set(everything) <= set(ours))


def delete_study_runs(tracker: Tracker, runs: StudyRuns) -> None:
    """Delete the study's runs, and its experiment when nothing else is in it.

    The experiment is renamed first: MLflow restores a deleted experiment's runs with it, and a new
    study of the same name must start with an experiment of its own.
    """
    if runs.experiment_id is None:
        return
    client = tracker.client
    if runs.shared:
        for run_id in runs.run_ids:
            client.delete_run(run_id)
        return
    experiment = client.get_experiment(runs.experiment_id)
    if experiment.lifecycle_stage == "deleted":
        return
    client.rename_experiment(runs.experiment_id, f"{experiment.name}-deleted-{int(time.time())}")
    client.delete_experiment(runs.experiment_id)  # and every run in it, in one transaction


def _run_ids(tracker: Tracker, experiment_id: str, filter_string: str | None) -> list[str]:
    """Ids of the experiment's active runs that match, every page of them."""
    ids: list[str] = []
    token = None
    while True:
        page = tracker.client.search_runs([experiment_id], filter_string or "", max_results=_PAGE, page_token=token)
        ids += [run.info.run_id for run in page]
        token = page.token
        if not token:
            return ids


def serving_example(tracker: Tracker, model_uri: str, rows: int = 1) -> str | None:
    """A request body for MLflow's model server: the first ``rows`` of the input example MLflow
    logged with the model (``serving_input_example.json``); None when it logged none."""
    import json
    import tempfile
    from pathlib import Path

    from mlflow.artifacts import download_artifacts
    from mlflow.exceptions import MlflowException

    name, version = model_uri.removeprefix("models:/").split("/", 1)
    found = tracker.client.get_model_version(name, version)
    source = str(found.source)
    # MLflow 3 registers a logged model (source ``models:/m-<id>``, whose files live at its own
    # artifact location); a version registered from a run's artifacts has them at its source.
    model_id = found.model_id or (source.removeprefix("models:/") if source.startswith("models:/m-") else None)
    location = tracker.client.get_logged_model(model_id).artifact_location if model_id else source
    bar = os.environ.get(_PROGRESS_BAR)
    os.environ[_PROGRESS_BAR] = "false"  # one small file: no progress bar on the terminal
    try:
        with tempfile.TemporaryDirectory(prefix="hpsearch-serve-") as tmp:
            path = download_artifacts(f"{location}/serving_input_example.json", dst_path=tmp,
                                      tracking_uri=tracker.location.tracking_uri)  # fmt: skip
            body = json.loads(Path(path).read_text())
    except (MlflowException, OSError, ValueError):
        return None
    finally:
        if bar is None:
            os.environ.pop(_PROGRESS_BAR, None)
        else:
            os.environ[_PROGRESS_BAR] = bar
    if isinstance(body.get("inputs"), list):
        body["inputs"] = body["inputs"][:rows]
    return json.dumps(body, separators=(",", ":"))
