"""What a finished search and a retrain print."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING, Any

from search.api._locations import MLFLOW_TRACKING_ENV
from search.coordination import epochs_trained, objective_error
from search.exceptions import SearchError
from search.observation import RetrainView, study_summary
from search.settings import ENV_PROJECT, ENV_STORAGE, ENV_TRACKING
from search.tracking import Tracker, read_champion, record_on_parent, retrain_and_register, retrained_version

if TYPE_CHECKING:
    from search.coordination import Coordinator
    from search.settings import Locations
    from search.tracking import RetrainResult


def final_summary(coordinator: Coordinator, loc: Locations, retrain: bool, quiet: bool,
                  already_finished: bool = False) -> int:  # fmt: skip
    """Print the outcome; retrain and register the best trial unless told not to, or unless the study
    was ``already_finished`` and a retrain of it registered a version already (then show the champion)."""
    if (error := objective_error(coordinator)) is not None:  # every trial would have failed the same way
        raise SearchError(f"study {coordinator.study_name!r} stopped: {error}; start a new study (--name) with "
                          "metrics its trials record")  # fmt: skip
    summary = study_summary(coordinator)
    record_on_parent(coordinator, loc, summary, finished=summary["finished"] >= summary["budget"])
    print(f"\nstudy {coordinator.study_name!r}: {summary['finished']}/{summary['budget']} trials finished "
          f"({summary['complete']} complete, {summary['pruned']} pruned{_paused(summary)}, "
          f"{summary['failed']} failed)")  # fmt: skip
    if summary.get("ended_early"):
        ended = summary["ended_early"]
        goes_on = "the same command goes on"
        if str(ended["reason"]).startswith("--epoch-budget"):  # running trials went on: what they all trained
            trials = coordinator.storage.get_all_trials(coordinator.study_id(), deepcopy=False)
            goes_on = f"{epochs_trained(trials)} epochs trained in all; a larger --epoch-budget goes on"
        print(f"  the search ended early: {ended['reason']}; no new trial after {ended['claimed']} of the "
              f"{ended['asked']} asked ({goes_on})")  # fmt: skip
    if summary.get("stopped_early"):
        print(f"  {summary['stopped_early']} of the complete trials stopped early (--patience)")
    if "first_rung" in summary:
        rung = summary["first_rung"]
        print(f"  pruned from epoch {rung['epoch']}: the first whose values ranked {rung['trials']} complete trials "
              f"like their final values (Spearman {rung['spearman']:.2f})")  # fmt: skip
    if summary.get("no_feasible_trial"):
        print(f"  no complete trial meets the constraints ({', '.join(coordinator.read_record().constraints)}): "
              "nothing to retrain")  # fmt: skip
    if "best_values" in summary:
        values = ", ".join(f"{v:.5g}" for v in summary["best_values"])
        front = ", ".join(map(str, summary["pareto_front"]))
        print(f"  champion trial {summary['best_trial']} (--select {summary['select']}): values {values}; Pareto "
              f"front: trials {front}")  # fmt: skip
    elif "best_trial" in summary:
        print(f"  best trial {summary['best_trial']}: value {summary['best_value']:.5g}")
    if "best_trial" in summary:
        for key, value in summary["best_params"].items():
            print(f"    {key} = {value}")
    if "overhead_mean_fraction" in summary:
        long_part = summary.get("overhead_fraction_trials_5s_plus")
        extra = f" ({100 * long_part:.1f}% for trials of 5 s or more)" if long_part is not None else ""
        print(f"  time outside training (claiming, setting up, tracking): median {summary['overhead_p50_s']:.2f} s "
              f"a trial, {100 * summary['overhead_mean_fraction']:.1f}% of the trials' time{extra}")  # fmt: skip
    registered = retrained_version(Tracker(loc.tracking()), coordinator) if already_finished else None
    if registered is not None:
        print_champion(coordinator, loc, registered)
    elif retrain and "best_trial" in summary:
        view = RetrainView(coordinator.read_record().metric, quiet=quiet)
        print_retrain(retrain_and_register(coordinator, loc, progress=view))
    _print_next_steps(coordinator, loc)
    if summary["finished"] and summary["failed"] == summary["finished"]:
        print(f"\nevery trial failed: see `search trials --name {shlex.quote(coordinator.study_name)} --state fail`")
        return 1  # nothing to show for the budget: a scheduler or script must notice
    return 0


def print_champion(coordinator: Coordinator, loc: Locations, registered: str) -> None:
    """The champion as ``search best`` reads it, after a run that retrained nothing."""
    champion = read_champion(Tracker(loc.tracking()), coordinator.study_name)
    print(f"\nretrained before: model {coordinator.study_name} version {registered}")
    if champion is not None:
        metrics = ", ".join(f"{k} {v:.4g}" for k, v in sorted(champion.test_metrics.items()))
        print(f"  champion: version {champion.version} (retrained trial {champion.source_trial}): "
              f"{metrics or 'no test metrics'}")  # fmt: skip
        print(f"  model URI: models:/{champion.model_name}@champion")


def print_retrain(result: RetrainResult) -> None:
    print(f"\nretrained trial {result.trial} at full scale (run {result.run_id})")
    for key, value in {**result.val_metrics, **result.test_metrics}.items():
        print(f"  {key} = {value:.4f}")
    state = "is the new champion" if result.became_champion else "registered (not champion)"
    print(f"  model {result.model_name} version {result.version} {state} (MLflow registered model "
          f"{result.model_name!r}: the study's name)")  # fmt: skip
    for note in result.notes:
        print(f"  {note}")
    print(f"  model URI: {result.model_uri}")


def _print_next_steps(coordinator: Coordinator, loc: Locations) -> None:
    print("\nnext:")
    flags = " ".join([f"--name {shlex.quote(coordinator.study_name)}", *where_flags(loc)])
    for command in ("status", "dashboard", "report", "mlflow"):
        print(f"  search {command} {flags}")
    if password_left_out(loc):
        print(f"  {PASSWORD_NOTE}")


def watch_hints(coordinator: Coordinator, loc: Locations) -> tuple[str, ...]:
    """Where to look while a search runs: the dashboard, and the MLflow UI (or its server's page)."""
    import storage

    flags = " ".join([f"--name {shlex.quote(coordinator.study_name)}", *where_flags(loc)])
    mlflow = f"search mlflow {flags}"
    if storage.TrackingLocation(loc.tracking_uri, loc.artifact_location).is_server:
        mlflow = f"MLflow: {storage.mask(loc.tracking_uri.rstrip('/'))}"
    return (f"dashboard: search dashboard {flags}", mlflow if mlflow.startswith("MLflow") else f"MLflow UI: {mlflow}")


PASSWORD_NOTE = ("(passwords are left out of these commands: set SEARCH_STORAGE / SEARCH_TRACKING_URI to the full "
                 "URLs, or give the password as PGPASSWORD or in ~/.pgpass)")  # fmt: skip


def where_flags(loc: Locations) -> list[str]:
    """The location flags a later command in this directory and shell needs to find the study again,
    quoted for a POSIX shell, with any password left out (see :func:`password_left_out`)."""
    import storage

    flags = []
    here = loc.project_dir.name == ".search" and loc.project_dir.parent.samefile(".")
    if not here and not os.environ.get(ENV_PROJECT):
        flags += ["--project-dir", str(loc.project_dir)]
    if _shown_storage(loc):
        flags += ["--storage", storage.without_password(loc.storage_url)[0]]
    if _shown_tracking(loc):
        flags += ["--tracking-uri", storage.without_password(loc.tracking_uri)[0]]
    return [flag if flag.startswith("--") else shlex.quote(flag) for flag in flags]


def password_left_out(loc: Locations) -> bool:
    """Whether :func:`where_flags` left a password out of a URL it shows."""
    import storage

    shown = [url for url, show in ((loc.storage_url, _shown_storage(loc)), (loc.tracking_uri, _shown_tracking(loc)))
             if show]  # fmt: skip
    return any(storage.without_password(url)[1] for url in shown)


def _shown_storage(loc: Locations) -> bool:
    return not loc.embedded and not os.environ.get(ENV_STORAGE)


def _shown_tracking(loc: Locations) -> bool:
    import storage

    default_tracking = storage.resolve_tracking(None, loc.project_dir, None).tracking_uri
    tracking_from_env = os.environ.get(ENV_TRACKING) or os.environ.get(MLFLOW_TRACKING_ENV)
    return loc.tracking_uri != default_tracking and not tracking_from_env


def _paused(summary: dict[str, Any]) -> str:
    """`` (3 paused ...)`` when freeze-thaw left paused trials that no worker resumed, or evicted some
    paused trials' checkpoints: they end pruned."""
    paused, evicted = summary.get("paused") or 0, summary.get("evicted") or 0
    notes = [f"{paused} paused, never resumed"] if paused else []
    notes += [f"{evicted} paused whose checkpoints were evicted (asha:disk)"] if evicted else []
    return f" ({'; '.join(notes)})" if notes else ""
