"""A study's data on the command line: ``search trials``, ``search best`` and ``search delete``."""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

import click

from search.cli._group import cli
from search.cli._options import find_study_options, location_options, option

_STATES = ("complete", "pruned", "fail", "running", "waiting")


@cli.command()
@find_study_options
@option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per trial.")
@option("--csv", "as_csv", is_flag=True,
        help="Print CSV, one line per trial with the JSON's fields: params.<name>, metrics.<name> and extra.<name> "
             "columns.")  # fmt: skip
@option("--state", "states", multiple=True, type=click.Choice(_STATES, case_sensitive=False),
        help="Only trials in this state (repeatable).")  # fmt: skip
@option("--sort", "sort_spec", metavar="KEY[:asc|desc]",
        help="Order by value (the objective), duration, epochs or a final metric (val_accuracy, val_f1, latency_ms, "
             "params, ...), best first: the objective's direction for value, ascending for duration, epochs, loss- "
             "or error-like metrics and deployment costs, descending for the rest; :asc or :desc chooses. Trials "
             "without it come last.")  # fmt: skip
@option("--top", type=click.IntRange(min=1), metavar="N",
        help="Only the first N trials after sorting (by value when --sort is not given).")  # fmt: skip
@location_options
def trials(**kwargs: Any) -> None:
    """Every trial of a study: number, state, value, its final metrics (each metric's last epoch, then
    what its model costs to deploy: params, flops_per_sample, latency_ms, latency_ms_batch, peak memory),
    params, epochs, duration, worker, host, retry of, fail reason and MLflow run id.

    Without --sort, trials are in number order: `search trials --sort val_accuracy --top 5` lists the
    five most accurate."""
    from search.api._open import open_existing
    from search.exceptions import SearchError
    from search.observation import parse_sort, rows_to_csv, rows_to_json, sort_rows, top_value_rows, trial_rows

    as_json, as_csv, states = kwargs.pop("as_json"), kwargs.pop("as_csv"), kwargs.pop("states")
    sort_spec, top = kwargs.pop("sort_spec"), kwargs.pop("top")
    if as_json and as_csv:
        raise SearchError("give --json or --csv, not both")
    coordinator = open_existing(kwargs)
    wanted = tuple(s.upper() for s in states) or None
    record = coordinator.read_record() if sort_spec or top else None
    if record is not None and top and (sort_spec or "value").partition(":")[0] == "value":
        key = parse_sort(sort_spec or "value", [], record.goals()[0].metric, record.goals()[0].direction)
        rows = top_value_rows(coordinator, key, top, wanted)  # the best N: only those read in full
    else:
        rows = trial_rows(coordinator, wanted)
        if record is not None:
            goal = record.goals()[0]
            rows = sort_rows(rows, parse_sort(sort_spec or "value", rows, goal.metric, goal.direction), top)
    if as_json:
        click.echo(rows_to_json(rows))
    elif as_csv:
        click.echo(rows_to_csv(rows), nl=False)
    else:
        click.echo("\n".join(_table(rows, (record or coordinator.read_record()).folds)))


_SHORT = (("accuracy", "acc"), ("perplexity", "ppl"))


def _table(rows: list[Any], folds: int = 0) -> list[str]:
    """The trials as a text table; a study of ``folds`` folds gets a column of the folds each trial
    finished, with their spread (the value is their mean)."""
    from search.observation import duration, metric_names

    metrics = metric_names(rows)
    short = [_short_name(m) for m in metrics]
    feasible = any(r.feasible is not None for r in rows)  # a study with --constraint
    header = ("#", "state", "value", *(("feasible",) if feasible else ()), *(("folds",) if folds else ()), *short,
              "epochs", "time", "worker", "retry of", "params / reason")  # fmt: skip
    lines = [header]
    for r in rows:
        params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.params.items())
        detail = params if r.state != "FAIL" else (r.fail_reason or "no reason recorded").splitlines()[0][:80]
        state = r.state
        if "paused_at" in r.extra and r.state == "PRUNED":  # freeze-thaw: its checkpoint kept to resume
            resumed = f"; resumed as trial {r.retried_as}" if r.retried_as is not None else ""
            state, detail = "PAUSED", f"{detail}; at epoch {r.extra['paused_at']}{resumed}"
        elif "paused_evicted" in r.extra and r.state == "PRUNED":  # its checkpoint went: asha:disk
            detail = f"{detail}; paused at epoch {r.extra['paused_evicted']}, checkpoint evicted (disk bound)"
        elif "exploited_at" in r.extra and r.state == "PRUNED":  # population-based training
            state, detail = "REPLACED", f"{detail}; at epoch {r.extra['exploited_at']}, by trial {r.retried_as}"
        elif r.retried_as is not None:  # an attempt a retry continues: not a failed trial (the summary agrees)
            state, detail = "RETRIED", f"{detail}; continued by trial {r.retried_as}"
        epochs = f"{r.epochs} (stopped)" if "stopped_epoch" in r.extra else str(r.epochs)  # --patience
        if r.state == "WAITING":  # a queued retry: where it resumes is known once its checkpoint is read
            epochs = "-"
        values = [f"{r.metrics[m]:.4g}" if m in r.metrics else "-" for m in metrics]
        value = "-" if r.values is None else "/".join(f"{v:.5g}" for v in r.values)  # several: one per objective
        ok: tuple[str, ...] = (("-" if r.feasible is None else "yes" if r.feasible else "no"),) if feasible else ()
        ok += (_folds_cell(r.folds, folds),) if folds else ()
        lines.append((str(r.number), state, value, *ok, *values, epochs,
                      "-" if r.duration_seconds is None else duration(r.duration_seconds), r.worker or "-",
                      "-" if r.retry_of is None else str(r.retry_of), detail))  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(line[:-1], widths, strict=True)), line[-1]]).rstrip()
            for line in lines]  # fmt: skip


def _folds_cell(values: list[float] | None, folds: int) -> str:
    """``3/3 ±0.012``: the folds a trial finished of the study's, and their standard deviation."""
    if not values:
        return f"0/{folds}"
    spread = f" ±{statistics.stdev(values):.2g}" if len(values) > 1 else ""
    return f"{len(values)}/{folds}{spread}"


def _short_name(metric: str) -> str:
    for long, short in _SHORT:
        metric = metric.replace(long, short)
    return metric


@cli.command()
@find_study_options
@option("--json", "as_json", is_flag=True, help="Print JSON.")
@location_options
def best(**kwargs: Any) -> None:
    """The best trial (value, params, epochs, MLflow run, deployment metrics) and the champion model: version,
    test metrics and deployment metrics (params, FLOPs, latency, peak memory).

    The best trial is the study's --select among trials that meet its --constraints; a study of several
    --objectives lists its Pareto front, the selected trial marked with *."""
    from search.api._open import open_existing_with_locations
    from search.api._results import best_trial
    from search.observation import deployment_text

    as_json = kwargs.pop("as_json")
    coordinator, loc = open_existing_with_locations(kwargs)
    result = best_trial(coordinator, loc)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    if result["pareto_front"]:
        click.echo("\n".join(_front(result)))
    else:
        click.echo(f"best trial {result['trial']} of {result['study']!r}: {result['metric']} {result['value']:.5g} "
                   f"({result['epochs']} epochs, MLflow run {result['mlflow_run_id']})")  # fmt: skip
    if result["folds"]:  # k-fold: the value is the mean of these
        folds = result["folds"]
        spread = f" (mean {statistics.fmean(folds):.5g}, std {statistics.stdev(folds):.2g})" if len(folds) > 1 else ""
        click.echo(f"  folds: {len(folds)}, {result['metric']} {', '.join(f'{v:.5g}' for v in folds)}{spread}")
    if result["constraints"]:
        click.echo(f"  meets {', '.join(result['constraints'])}")
    for key, value in result["params"].items():
        click.echo(f"  {key} = {value}")
    if deployment := deployment_text(result["metrics"], result["latency_batch"]):
        click.echo(f"  deployment: {deployment}")
    champion = result["champion"]
    if champion is None:
        click.echo("champion: none registered yet (`search retrain`)")
        return
    metrics = ", ".join(f"{k} {v:.4g}" for k, v in sorted(champion["test_metrics"].items()))
    click.echo(f"champion: {champion['model']} version {champion['version']} (retrained trial "
               f"{champion['source_trial']}): {metrics or 'no test metrics'}")  # fmt: skip
    if deployment := deployment_text(champion["deployment"], result["latency_batch"]):
        click.echo(f"  deployment: {deployment}")
    exports = ", ".join(f"{fmt} {'ok' if status == 'ok' else 'failed: ' + status}"
                        for fmt, status in sorted(champion["exports"].items()))  # fmt: skip
    click.echo(f"  exports: {exports or 'none'} (`search export --name {result['study']}` writes one)")


def _front(result: dict[str, Any]) -> list[str]:
    """A multi-objective study's Pareto front, one trial a line, the champion marked with ``*``."""
    names = [o["metric"] for o in result["objectives"]]
    goals = ", ".join(f"{o['direction']} {o['metric']}" for o in result["objectives"])
    kept = f"; trials meeting {', '.join(result['constraints'])}" if result["constraints"] else ""
    lines = [f"Pareto front of {result['study']!r} ({goals}{kept}); * the champion (--select {result['select']}):"]
    for point in result["pareto_front"]:
        values = ", ".join(f"{n} {v:.5g}" for n, v in zip(names, point["values"], strict=True))
        lines.append(f"{'*' if point['champion'] else ' '} trial {point['trial']}: {values}")
    lines.append(f"champion trial {result['trial']} ({result['epochs']} epochs, MLflow run {result['mlflow_run_id']})")
    return lines


@cli.command()
@find_study_options
@option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@option("--force", is_flag=True, help="Delete even while trials are running (their workers will fail).")
@location_options
def delete(**kwargs: Any) -> None:
    """Remove a study: its Optuna study, its MLflow runs and its checkpoints.

    Registered model versions are kept (a deployed champion is not this command's to remove).
    """
    from search.api._open import open_existing_with_locations
    from search.exceptions import SearchError
    from search.settings import remove_study_dir, study_dir
    from search.tracking import Tracker, delete_study_runs, find_study_runs, model_versions

    yes, force = kwargs.pop("yes"), kwargs.pop("force")
    coordinator, loc = open_existing_with_locations(kwargs)
    name = coordinator.study_name
    counts = coordinator.counts()
    running, queued = counts.state("RUNNING"), counts.state("WAITING")
    if running and not force:  # queued trials (retries, grid points) are no one's work yet: they go with the study
        raise SearchError(f"study {name!r} has {running} running trial{'s' * (running != 1)}; stop its workers "
                          "or give --force")  # fmt: skip
    tracker = Tracker(loc.tracking())
    runs = find_study_runs(tracker, coordinator)
    # Only the folders this study's trials wrote, under the roots its starts and workers recorded (and
    # this command's): never a path taken from the command line as it stands.
    roots = list(dict.fromkeys([*coordinator.checkpoint_roots(), loc.checkpoint_root]))
    folders = [study_dir(root, name) for root in roots if study_dir(root, name).is_dir()]
    what = (f"study {name!r}: {counts.total} trials in the Optuna storage"
            + (f" ({queued} of them queued)" if queued else "") + f", {len(runs.run_ids)} MLflow runs"
            + "".join(f", checkpoints in {folder}" for folder in folders))  # fmt: skip
    versions = model_versions(tracker, name)
    kept = f"registered model {name!r} ({versions} version{'s' * (versions != 1)}) is kept" if versions else ""
    if not yes and not _confirm(f"delete {what}?" + (f" ({kept})" if kept else "")):
        click.echo("nothing deleted")
        sys.exit(1)
    numbers = {t.number for t in coordinator.load().get_trials(deepcopy=False)}
    delete_study_runs(tracker, runs)
    left = [path for root in roots for path in remove_study_dir(root, name, numbers)]
    coordinator.delete()
    click.echo(f"deleted {what}")
    if left:
        click.echo(f"kept {len(left)} entr{'ies' if len(left) != 1 else 'y'} not written by this study's trials: "
                   + ", ".join(str(path) for path in left[:5]) + (" ..." if len(left) > 5 else ""))  # fmt: skip
    if kept:
        click.echo(f"{kept}: delete it in MLflow if you want")


def _confirm(question: str) -> bool:
    """Ask; no input at all (a closed stdin, Ctrl-D) is a no."""
    try:
        return click.confirm(question, default=False)
    except click.Abort:
        click.echo()
        return False
