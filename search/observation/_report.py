"""``search report``: one self-contained HTML page about a study, also kept on its MLflow parent run.

The page inlines plotly.js once (no CDN), so it opens offline, from an e-mail or from MLflow's
artifact view alike.
"""

from __future__ import annotations

import html
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError
from search.observation._lineage_plot import lineage_section
from search.observation._pareto_plot import pareto_section
from search.observation._report_draw import curve_steps, draw, history_figure
from search.observation._report_tables import STATE_COLORS, Section, champion_section, worker_timeline
from search.observation._savings import log_axis_if_wide, outcomes_note, savings_section
from search.observation._trials import SortKey, count_reasons, failure_reasons, top_value_rows
from search.settings import describe_objectives

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial
    from plotly.graph_objects import Figure

    from search.coordination import Coordinator
    from search.observation._progress import Snapshot
    from search.settings import Locations, StudyRecord

REPORT_ARTIFACT = "study_report.html"
MIN_TRIALS_FOR_IMPORTANCE = 3
"""Fewer complete trials than this give importances that are noise; the page says so instead."""
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}


@dataclass(frozen=True)
class ReportResult:
    path: Path
    sections: list[Section]
    mlflow_run_id: str | None


def write_report(coordinator: Coordinator, loc: Locations, output: Path, attach: bool = True) -> ReportResult:
    """Write the page to ``output`` and, unless told not to, attach it to the study's MLflow parent run."""
    sections = build_sections(coordinator, loc)
    page = render_page(coordinator, sections)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(page, encoding="utf-8")
    run_id = attach_to_parent(coordinator, loc, page) if attach else None
    return ReportResult(output, sections, run_id)


def build_sections(coordinator: Coordinator, loc: Locations | None = None) -> list[Section]:
    """Every section of the page; with ``loc``, also the champion read from MLflow and links to runs."""
    import optuna.visualization as vis

    import storage as st
    from search.coordination import EXPERIMENT_ATTR
    from search.observation import _report_tables as tables
    from search.observation._trials import trial_row

    record = coordinator.read_record()
    study = coordinator.load(record)
    # The first objective is what the plots of values show (Optuna's need a target with several).
    goal, several = record.goals()[0], len(record.goals()) > 1
    metric, target = goal.metric, (lambda t: t.values[0]) if several else None
    drawn = None if several else draw(coordinator, goal.maximize)  # a Pareto front is drawn whole
    if drawn is None:  # every trial, drawn and listed
        trials = study.get_trials(deepcopy=False)
        rows = listed = [trial_row(t) for t in trials]
        reasons = failure_reasons(rows)
    else:  # a sample; the table lists the best, the failures are counted over every trial
        trials = drawn.trials
        study = st.study_of_trials(trials, goal.direction, study.user_attrs)
        rows = [trial_row(t) for t in trials]
        listed = top_value_rows(coordinator, SortKey("value", goal.maximize), drawn.limit)
        with coordinator.storage.engine.connect() as conn:
            reasons = count_reasons(st.fail_reasons(conn, coordinator.study_id()))
    complete = sum(1 for r in rows if r.state == "COMPLETE")
    link = tables.mlflow_run_link(loc, study.user_attrs.get(EXPERIMENT_ATTR))
    head = [] if loc is None else [champion_section(coordinator, loc, study)]
    if drawn is None:
        history = vis.plot_optimization_history(study, target=target, target_name=metric)
    else:
        history = history_figure(trials, goal.maximize, metric)
    curves = learning_curves(trials, record)
    per_trial = record.search_epochs * max(1, record.folds)  # k-fold: each fold's epochs
    sections = [
        Section("history", "Optimization history",
                f"Each dot is a complete trial's {metric}; the line is the best value so far."
                + _log_scale(history, [t.values[0] for t in trials if t.state.name == "COMPLETE" and t.values]),
                history),
        Section("curves", "Learning curves",
                f"{metric} after each {'fold (its best epoch)' if record.folds else 'epoch'}. "
                f"{outcomes_note(trials, per_trial, record.settings.pruner)}"
                + _log_scale(curves, [v for t in trials for v in t.intermediate_values.values()]),
                curves),
        *filter(None, [lineage_section(trials, record), pareto_section(trials, record)]),
        Section("parallel", "Parallel coordinates",
                f"One line per complete trial through its parameters, coloured by {metric}.",
                vis.plot_parallel_coordinate(study, target=target, target_name=metric)),
        importance_section(study, metric, _ranked(record) if target else None),
        tables.slice_section(study, metric, complete, target, _ranked(record) if target else None),
        savings_section(trials, per_trial, record.settings.pruner, tables.seconds_saved(rows, per_trial)),
        Section("failures", "Why trials failed", tables.failures_note(reasons), html=tables.failures_table(reasons)),
        Section("timeline", "Trials per worker",
                "When each worker ran which trial (the number on the bar), coloured by how the trial ended.",
                worker_timeline(trials)),
        Section("trials", "Every trial" if drawn is None else f"The best {len(listed):,} trials",
                "Click a column's header to sort by it." if drawn is None else
                f"The {len(listed):,} best of the study's {drawn.total:,} trials by {metric} (`search trials --csv` "
                "lists every one). Click a column's header to sort by it.",
                html=tables.trials_table(listed, link)),
    ]  # fmt: skip
    if drawn is not None:  # each figure says it draws a sample
        sections = [replace(s, note=s.note + drawn.note) if s.figure is not None else s for s in sections]
    return [*head, *sections]


def _log_scale(figure: Figure, values: list[float]) -> str:
    """Put ``figure``'s value axis on a log scale when ``values`` span decades; the caption's words for it."""
    if not log_axis_if_wide(values):
        return ""
    figure.update_yaxes(type="log")
    return " The value axis is logarithmic: the values span more than a decade."


def learning_curves(trials: list[FrozenTrial], record: StudyRecord) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    shown: set[str] = set()
    step = "fold" if record.folds else "epoch"
    for trial in trials:
        steps = curve_steps(sorted(trial.intermediate_values))
        if not steps:
            continue
        state = trial.state.name
        values = [trial.intermediate_values[s] for s in steps]
        symbols = ["circle"] * len(steps)
        if state == "PRUNED":
            symbols[-1] = "x"
        fig.add_trace(go.Scatter(
            x=steps, y=values, mode="lines+markers", name=state.lower(), legendgroup=state,
            showlegend=state not in shown, line={"color": STATE_COLORS.get(state, "#999999"), "width": 1.5},
            marker={"symbol": symbols, "size": [6] * (len(steps) - 1) + [11 if state == "PRUNED" else 6]},
            hovertemplate=f"trial {trial.number} ({state.lower()})<br>{step} %{{x}}: %{{y:.4g}}<extra></extra>",
        ))  # fmt: skip
        shown.add(state)
    if not record.folds:  # k-fold: a curve is a trial's folds, one value each
        fig.add_vline(x=record.search_epochs, line_dash="dot", line_color="#888888",
                      annotation_text="search epochs", annotation_position="top left")  # fmt: skip
    fig.update_layout(xaxis_title="fold" if record.folds else "epoch", yaxis_title=record.metric,
                      template="plotly_white")  # fmt: skip
    fig.update_xaxes(dtick=1)
    return fig


def _ranked(record: StudyRecord) -> Any:
    """The first objective as Optuna's importance evaluator (PED-ANOVA) ranks a target: low is good."""
    sign = -1.0 if record.maximize()[0] else 1.0
    return lambda t: sign * t.values[0]


def importance_section(study: optuna.Study, metric: str, target: Any = None) -> Section:
    import optuna.visualization as vis
    from optuna.trial import TrialState

    title = "Parameter importances"
    complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    if complete < MIN_TRIALS_FOR_IMPORTANCE:
        return Section("importance", title, f"Not enough complete trials to estimate importances yet "
                       f"({complete} complete, {MIN_TRIALS_FOR_IMPORTANCE} needed).")  # fmt: skip
    try:
        with warnings.catch_warnings():  # that it ranks low values of a target first: _ranked does so
            warnings.simplefilter("ignore", UserWarning)
            figure = vis.plot_param_importances(study, target=target, target_name=metric)
    except (ValueError, RuntimeError) as exc:  # e.g. every trial has the same params
        return Section("importance", title, f"Importances could not be estimated: {exc}")
    return Section("importance", title,
                   f"How much of the variation in {metric} each parameter explains (fANOVA over "
                   f"{complete} complete trials).", figure)  # fmt: skip


def render_page(coordinator: Coordinator, sections: list[Section]) -> str:
    from search.observation._progress import snapshot

    snap = snapshot(coordinator)
    record = coordinator.read_record()
    title = html.escape(f"hpsearch report: {snap.study}")
    body = "\n".join(_render_section(section, first=index == _first_figure(sections))
                     for index, section in enumerate(sections))  # fmt: skip
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{_CSS}</style></head><body>\n<h1>{html.escape(snap.study)}</h1>\n"
            f"{_summary_table(coordinator, snap, record)}\n{body}\n</body></html>\n")  # fmt: skip


def _first_figure(sections: list[Section]) -> int:
    return next((i for i, s in enumerate(sections) if s.figure is not None), -1)


def _render_section(section: Section, first: bool) -> str:
    head = (f'<section id="{section.key}" data-{"figure" if section.figure else "note"}="{section.key}">'
            f"<h2>{html.escape(section.title)}</h2><p class=\"note\">{html.escape(section.note)}</p>")  # fmt: skip
    if section.figure is None:
        return head + section.html + "</section>"
    section.figure.update_layout(template="plotly_white", title_text="", margin={"t": 40})
    plot = section.figure.to_html(full_html=False, include_plotlyjs=first, div_id=f"plot-{section.key}",
                                  config=_PLOT_CONFIG, default_height="460px")  # fmt: skip
    return f"{head}{plot}</section>"


def _summary_table(coordinator: Coordinator, snap: Snapshot, record: StudyRecord) -> str:
    import storage

    best = "-" if snap.best_value is None else f"{snap.best_value:.6g} (trial {snap.best_trial})"
    rows: list[tuple[str, Any]] = [
        ("objective", describe_objectives(record.goals(), record.limits())),
        ("trials", f"{snap.finished}/{snap.budget} finished: {snap.complete} complete, {snap.pruned} pruned"
                   f"{snap.paused_note()}, {snap.failed} failed; {snap.running} running"),
        *([("ended early", snap.ended_note().removeprefix("ended early: "))] if snap.ended_early else []),
        ("best", best),
        *_best_params(coordinator, snap),
        ("sampler / pruner", f"{record.settings.sampler} / {record.settings.pruner}"),
        ("epochs per trial", f"{record.search_epochs} x {record.folds} folds" if record.folds else
         record.search_epochs),
        ("optuna storage", storage.describe(coordinator.url)),
        ("generated", time.strftime("%Y-%m-%d %H:%M:%S %Z")),
    ]  # fmt: skip
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f'<table class="summary">{cells}</table>'


def _best_params(coordinator: Coordinator, snap: Snapshot) -> list[tuple[str, Any]]:
    if snap.best_trial is None:
        return []
    study_id = coordinator.study_id()
    trial_id = coordinator.storage.get_trial_id_from_study_id_trial_number(study_id, snap.best_trial)
    params = coordinator.storage.get_trial(trial_id).params
    return [(f"  {key}", f"{value:.4g}" if isinstance(value, float) else value) for key, value in params.items()]


def attach_to_parent(coordinator: Coordinator, loc: Locations, page: str) -> str:
    """Log the page on the study's MLflow parent run; returns the run id."""
    from mlflow.exceptions import MlflowException

    import storage
    from search.coordination import PARENT_RUN_ATTR
    from search.tracking import Tracker

    study_id = coordinator.study_id()
    run_id = coordinator.storage.get_study_user_attrs(study_id).get(PARENT_RUN_ATTR)
    if not run_id:
        raise SearchError(f"study {coordinator.study_name!r} has no MLflow parent run (use --no-mlflow)")
    tracker = Tracker(loc.tracking())
    try:
        tracker.client.get_run(run_id)
    except MlflowException:
        raise SearchError(f"the study's MLflow parent run {run_id} is not in {storage.mask(loc.tracking_uri)} "
                          "(give --tracking-uri, or --no-mlflow)") from None  # fmt: skip
    tracker.client.log_text(run_id, page, REPORT_ARTIFACT)
    return str(run_id)


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1400px;
       padding: 0 1rem; color: #222; }
h1 { margin-bottom: .5rem; } h2 { margin: 2.2rem 0 .3rem; font-size: 1.25rem; }
p.note { color: #555; margin: 0 0 .5rem; }
table.summary { border-collapse: collapse; font-size: .95rem; }
table.summary th { text-align: left; padding: .15rem 1.2rem .15rem 0; color: #555; font-weight: 500;
                   white-space: pre; }
table.summary td { padding: .15rem 0; font-variant-numeric: tabular-nums; }
section { border-top: 1px solid #e5e5e5; }
table.trials, table.failures { border-collapse: collapse; font-size: .8rem; width: 100%; }
table.trials th, table.trials td, table.failures th, table.failures td { padding: .2rem .4rem; text-align: left;
  border-bottom: 1px solid #eee; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.trials th { white-space: normal; vertical-align: bottom; }
div.table-scroll { overflow: auto; max-height: 80vh; border: 1px solid #eee; }
table.trials th { cursor: pointer; user-select: none; background: #fafafa; position: sticky; top: 0; }
table.trials th[data-order="asc"]::after { content: " ▲"; } table.trials th[data-order="desc"]::after { content: " ▼"; }
table.trials tr.pruned td { color: #a65d00; } table.trials tr.fail td { color: #b00020; }
"""
