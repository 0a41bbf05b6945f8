"""A study in numbers: the start header, the outcome counts, best trial and service overhead."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from search.coordination import STOPPED_ATTR
from search.settings import (
    FIRST_RUNG_ATTR,
    champion_number,
    describe,
    describe_grid,
    describe_objectives,
    pareto_front,
    patience_spare,
    resolve_patience,
)
from search.settings._selection import candidates

if TYPE_CHECKING:
    from search.coordination import Coordinator
    from search.settings import Locations

LONG_TRIAL_S = 5.0


def print_start_header(coordinator: Coordinator, loc: Locations, created: bool, quiet: bool, chose: str = "") -> None:
    """The lines a search starts with; ``chose``: what ``--sampler auto`` chose, and why."""
    import storage

    if quiet:
        return
    counts = coordinator.counts()
    verb = "created" if created else f"resumed ({counts.finished_logical} trials already finished)"
    print(f"study {coordinator.study_name!r} {verb}; budget {coordinator.budget()} trials", flush=True)
    record = coordinator.read_record()
    settings = record.settings
    print(f"  strategy: {describe(settings.sampler, settings.pruner)}", flush=True)
    if chose:
        print(f"  {chose}", flush=True)
    if record.folds:
        print(f"  folds: {record.folds}; a trial fits each in turn ({record.search_epochs} epochs each), its value "
              f"the mean of theirs{_fold_pruning(settings.pruner, record.folds)}", flush=True)  # fmt: skip
    if record.objectives or record.constraints:
        pruned = f"the pruner prunes on {record.metric} only" if not record.objectives else \
            f"no pruning: trials end early only by --patience on {record.metric}"  # fmt: skip
        print(f"  objectives: {describe_objectives(record.goals(), record.limits())}; champion: --select "
              f"{settings.select}; {pruned}", flush=True)  # fmt: skip
    patience = resolve_patience(settings.patience, record.search_epochs)
    if patience:
        how = " (auto: a fifth of the search epochs)" if settings.patience.startswith("auto") else ""
        spare = patience_spare(settings.patience) if not record.folds else 0  # no contention inside a fold
        how += f", unless within the top {spare:.0%} of the complete trials" if spare else ""
        what = "a fold's training ends" if record.folds else "a trial ends, complete,"
        print(f"  early stop: {what} after {patience} epochs without improvement{how}", flush=True)
    if record.grid:
        print(f"  grid: {describe_grid(record.grid)}; each runs once, in the order --seed {settings.seed} fixes",
              flush=True)  # fmt: skip
    for name, (low, high) in record.narrow.items():
        print(f"  narrowed: {name} searched in {low:g} .. {high:g}", flush=True)
    print(f"  optuna storage: {storage.describe(loc.storage_url)}", flush=True)
    print(f"  mlflow tracking: {storage.mask(loc.tracking_uri)}", flush=True)
    print(f"  worker logs: {loc.project_dir / 'logs'}", flush=True)


def _fold_pruning(pruner: str, folds: int) -> str:
    """``; the pruner never prunes here`` when its test cannot decide before the last fold."""
    from search.settings import parse_pruner

    spec = parse_pruner(pruner)
    first = getattr(spec, "first_fold", None)
    if first is None or first() < folds:  # asked after each fold but the last
        return ""
    return f"; {spec.name} could prune only from fold {first()} on: with {folds} folds it never prunes"


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

    from storage import study_id

    study = coordinator.load()
    trials = study.get_trials(deepcopy=False)
    counts = coordinator.counts()
    summary: dict[str, Any] = {
        "budget": coordinator.budget(),
        "finished": counts.finished_logical,
        "complete": counts.state("COMPLETE"),
        "pruned": counts.pruned,
        "paused": counts.paused,
        "evicted": counts.evicted,
        "failed": counts.failed,
        "retried": counts.retries,
        "stopped_early": sum(1 for t in trials if t.state == TrialState.COMPLETE and "stopped_epoch" in t.user_attrs),
        **overhead_stats([t for t in trials if t.state.is_finished()]),
    }
    if study.user_attrs.get(STOPPED_ATTR):
        summary["ended_early"] = study.user_attrs[STOPPED_ATTR]
    first_rung = coordinator.storage.get_study_system_attrs(study_id(study)).get(FIRST_RUNG_ATTR)
    if first_rung:
        summary["first_rung"] = first_rung
    record = coordinator.read_record()
    number = champion_number(trials, record.maximize(), record.settings.select)
    if number is not None:  # the champion by --select, among trials that meet the constraints
        best = next(t for t in trials if t.number == number)
        summary.update(best_trial=best.number, best_value=best.values[0], best_params=best.params)
        if len(best.values) > 1:
            summary.update(best_values=list(best.values), select=record.settings.select, pareto_front=[
                c.number for c in pareto_front(candidates(trials), record.maximize())])  # fmt: skip
    elif any(t.state == TrialState.COMPLETE for t in trials):
        summary["no_feasible_trial"] = True
    return summary
