"""The study's MLflow parent run: created with the study, and where its summary is kept."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from search.coordination import EXPERIMENT_ATTR, PARENT_RUN_ATTR
from search.exceptions import SearchError
from search.tracking._tracker import ROLE_TAG, Tracker

if TYPE_CHECKING:
    import optuna

    from search.coordination import Coordinator
    from search.settings import Locations


def record_on_parent(coordinator: Coordinator, loc: Locations, summary: dict[str, Any], finished: bool = False) -> None:
    """Study summary on the MLflow parent run; the run ends FINISHED once the budget is spent."""
    run_id = coordinator.load().user_attrs.get(PARENT_RUN_ATTR)
    if not run_id:
        return
    tracker = Tracker(loc.tracking())
    metrics = {k: float(v) for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    tracker.log_metrics(run_id, metrics)
    tags = {f"best.{k}": v for k, v in summary.get("best_params", {}).items()}
    if "best_trial" in summary:
        tags["hpsearch.best_trial"] = summary["best_trial"]
    if tags:
        tracker.set_tags(run_id, tags)
    tracker.client.log_dict(run_id, summary, "study_summary.json")
    if finished:
        end_orphaned_trial_runs(tracker, str(coordinator.load().user_attrs[EXPERIMENT_ATTR]), run_id)
        tracker.end_run(run_id, "FINISHED")


def end_orphaned_trial_runs(tracker: Tracker, experiment_id: str, parent_run_id: str) -> int:
    """With every trial of the study finished, end the trial runs still RUNNING as KILLED; how many.

    Such a run's worker died between creating it and storing its id on the trial, so no reaper
    knew which run to end.
    """
    query = (f"tags.`mlflow.parentRunId` = '{parent_run_id}' AND tags.`{ROLE_TAG}` = 'trial' "
             "AND attributes.status = 'RUNNING'")  # fmt: skip
    orphans = tracker.client.search_runs([experiment_id], filter_string=query, max_results=1000)
    for run in orphans:
        tracker.set_tags(run.info.run_id, {"hpsearch.state": "FAIL", "hpsearch.fail_reason": "worker lost"})
        tracker.end_run(run.info.run_id, "KILLED")
    return len(orphans)


def open_parent_run(optuna_study: optuna.Study, loc: Locations, resumed: bool, summary: Mapping[str, Any]) -> None:
    """Create the study's MLflow experiment and parent run, or set a resumed study's parent RUNNING again."""
    from storage import mask, prepare_sqlite_tracking

    attrs = optuna_study.user_attrs
    location = loc.tracking()
    try:
        if PARENT_RUN_ATTR not in attrs:
            tracker = Tracker(location)
            experiment_id = tracker.experiment_id(optuna_study.study_name)
            prepare_sqlite_tracking(location)  # WAL, now that the experiment created the file
            parent = tracker.start_parent(experiment_id, optuna_study.study_name, summary)
            optuna_study.set_user_attr(EXPERIMENT_ATTR, experiment_id)
            optuna_study.set_user_attr(PARENT_RUN_ATTR, parent)  # last: workers wait for it (ParentRun)
        elif resumed:
            # A resumed study runs again: so does its parent run (it was FINISHED by the last search).
            Tracker(location).client.update_run(str(attrs[PARENT_RUN_ATTR]), status="RUNNING")
    except SearchError:  # an outage past its limit, with its own line and exit code
        raise
    except Exception as exc:  # the tracking location is unusable (a path that cannot be a database...)
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise SearchError(
            mask(f"MLflow at {location.tracking_uri} could not record the study: {type(exc).__name__}: {first}")
        ) from exc
