"""What a finished search prints, and the study summary kept on the MLflow parent run."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from search._coordinator import Coordinator
    from search._retrain import RetrainResult
    from search._settings import Locations

LONG_TRIAL_S = 5.0


def print_start_header(coordinator: Coordinator, loc: Locations, created: bool, quiet: bool) -> None:
    import storage

    if quiet:
        return
    counts = coordinator.counts()
    verb = "created" if created else f"resumed ({counts.finished_logical} trials already finished)"
    print(f"study {coordinator.study_name!r} {verb}; budget {coordinator.budget()} trials", flush=True)
    print(f"  optuna storage: {storage.describe(loc.storage_url)}", flush=True)
    print(f"  mlflow tracking: {storage.mask(loc.tracking_uri)}", flush=True)
    print(f"  worker logs: {loc.project_dir / 'logs'}", flush=True)


def overhead_stats(trials: list[Any]) -> dict[str, float]:
    """Per-trial service overhead (worker time not spent inside ``trainer.fit``)."""
    rows = [(t.user_attrs["overhead_seconds"], t.user_attrs["wall_seconds"]) for t in trials
            if "overhead_seconds" in t.user_attrs and t.user_attrs.get("wall_seconds")]  # fmt: skip
    if not rows:
        return {}
    long_rows = [r for r in rows if r[1] >= LONG_TRIAL_S]
    stats = {
        "overhead_p50_s": statistics.median(r[0] for r in rows),
        "overhead_mean_fraction": sum(r[0] for r in rows) / sum(r[1] for r in rows),
    }
    if long_rows:
        stats["overhead_fraction_trials_5s_plus"] = sum(r[0] for r in long_rows) / sum(r[1] for r in long_rows)
    return stats


def study_summary(coordinator: Coordinator) -> dict[str, Any]:
    from optuna.trial import TrialState

    study = coordinator.load()
    trials = study.get_trials(deepcopy=False)
    counts = coordinator.counts()
    summary: dict[str, Any] = {
        "budget": coordinator.budget(),
        "finished": counts.finished_logical,
        "complete": counts.state("COMPLETE"),
        "pruned": counts.state("PRUNED"),
        "failed": counts.finished_logical - counts.state("COMPLETE") - counts.state("PRUNED"),
        "retried": counts.retries,
        **overhead_stats([t for t in trials if t.state.is_finished()]),
    }
    if any(t.state == TrialState.COMPLETE for t in trials):
        best = study.best_trial
        summary.update(best_trial=best.number, best_value=best.value, best_params=best.params)
    return summary


def record_on_parent(coordinator: Coordinator, loc: Locations, summary: dict[str, Any], finished: bool = False) -> None:
    """Study summary on the MLflow parent run; the run ends FINISHED once the budget is spent."""
    from search._coordinator import PARENT_RUN_ATTR
    from search._tracking import Tracker
    from storage import resolve_tracking

    run_id = coordinator.load().user_attrs.get(PARENT_RUN_ATTR)
    if not run_id:
        return
    tracker = Tracker(resolve_tracking(loc.tracking_uri, loc.project_dir, loc.artifact_location))
    metrics = {k: float(v) for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    tracker.log_metrics(run_id, metrics)
    tags = {f"best.{k}": v for k, v in summary.get("best_params", {}).items()}
    if "best_trial" in summary:
        tags["hpsearch.best_trial"] = summary["best_trial"]
    if tags:
        tracker.set_tags(run_id, tags)
    tracker.client.log_dict(run_id, summary, "study_summary.json")
    if finished:
        tracker.end_run(run_id, "FINISHED")


def final_summary(coordinator: Coordinator, loc: Locations, retrain: bool, quiet: bool) -> int:
    """Print the outcome; retrain and register the best trial unless told not to."""
    summary = study_summary(coordinator)
    record_on_parent(coordinator, loc, summary, finished=summary["finished"] >= summary["budget"])
    print(f"\nstudy {coordinator.study_name!r}: {summary['finished']}/{summary['budget']} trials finished "
          f"({summary['complete']} complete, {summary['pruned']} pruned, {summary['failed']} failed)")  # fmt: skip
    if "best_trial" in summary:
        print(f"  best trial {summary['best_trial']}: value {summary['best_value']:.5g}")
        for key, value in summary["best_params"].items():
            print(f"    {key} = {value}")
    if "overhead_mean_fraction" in summary:
        long_part = summary.get("overhead_fraction_trials_5s_plus")
        extra = f", {100 * long_part:.1f}% on trials of 5 s or more" if long_part is not None else ""
        print(f"  service overhead per trial: median {summary['overhead_p50_s'] * 1000:.0f} ms, "
              f"{100 * summary['overhead_mean_fraction']:.1f}% of trial time{extra}")  # fmt: skip
    if retrain and "best_trial" in summary:
        from search._retrain import retrain_and_register

        print_retrain(retrain_and_register(coordinator, loc))
    _print_next_steps(coordinator, loc)
    return 0


def print_retrain(result: RetrainResult) -> None:
    print(f"\nretrained trial {result.trial} at full scale (run {result.run_id})")
    for key, value in {**result.val_metrics, **result.test_metrics}.items():
        print(f"  {key} = {value:.4f}")
    state = "is the new champion" if result.became_champion else "registered (not champion)"
    print(f"  model {result.model_name} version {result.version} {state}")
    for note in result.notes:
        print(f"  {note}")
    print(f"  model URI: {result.model_uri}")


def _print_next_steps(coordinator: Coordinator, loc: Locations) -> None:
    where = [] if loc.embedded and loc.project_dir.name == ".search" and loc.project_dir.parent.samefile(".") \
        else ["--project-dir", str(loc.project_dir)]  # fmt: skip
    flags = " ".join(where)
    print("\nnext:")
    for command in ("status", "dashboard", "report", "mlflow"):
        print(f"  search {command} --name {coordinator.study_name} {flags}".rstrip())
