"""Reading the champion back from MLflow's registry, and removing a study's runs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from search.tracking._retrain import CHAMPION

if TYPE_CHECKING:
    from search.tracking._tracker import Tracker


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
    )  # fmt: skip


def count_study_runs(tracker: Tracker, experiment_id: str) -> int:
    return len(tracker.client.search_runs([experiment_id], max_results=50000))


def delete_study_runs(tracker: Tracker, experiment_id: str) -> int:
    """Delete the study's experiment and every run in it; the number of runs.

    The experiment is renamed first: MLflow restores a deleted experiment's runs with it, and a new
    study of the same name must start with an experiment of its own.
    """
    client = tracker.client
    runs = count_study_runs(tracker, experiment_id)
    experiment = client.get_experiment(experiment_id)
    client.rename_experiment(experiment_id, f"{experiment.name}-deleted-{int(time.time())}")
    client.delete_experiment(experiment_id)
    return runs
