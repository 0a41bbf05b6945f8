"""The report's tables and the sections that need more than the Optuna study: every trial (sortable),
failure reasons, the champion, time saved by pruning, and slice plots of the important parameters."""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from search.observation._trials import TrialRow

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial
    from plotly.graph_objects import Figure

    from search.coordination import Coordinator
    from search.settings import Locations
    from search.tracking import Champion

SLICE_PARAMS = 3
STATE_COLORS = {"COMPLETE": "#1f77b4", "PRUNED": "#ff7f0e", "FAIL": "#d62728", "RUNNING": "#7f7f7f"}


@dataclass(frozen=True)
class Section:
    """One part of the page: a title, a sentence on how to read it, and a figure (or only the note)."""

    key: str
    title: str
    note: str
    figure: Figure | None = None
    html: str = ""
    """Markup built from escaped text (a table), shown under the note."""


_SPEED = (("samples_per_second", "samples/s"), ("model_tflops", "TFLOP/s"), ("mfu", "MFU"),
          ("peak_memory_mb", "peak MiB"))  # fmt: skip
"""Trial attributes shown as columns when some trial has them (MFU and memory: GPU trials only)."""
_DEPLOYMENT = (("params", "params"), ("flops_per_sample", "FLOPs/sample"), ("latency_ms", "latency ms"),
               ("latency_ms_batch", "ms/sample, batch"), ("peak_rss_mb", "peak RSS MiB"))  # fmt: skip
"""Final metrics shown as columns when some trial has them: what its model costs to deploy."""


def trials_table(rows: list[TrialRow], run_link: Any) -> str:
    """One row per trial, a column per parameter; a click on a header sorts by it (inline script)."""
    names = sorted({name for r in rows for name in r.params})
    speed = [(key, title) for key, title in _SPEED if any(key in r.extra for r in rows)]
    deploy = [(key, title) for key, title in _DEPLOYMENT if any(key in r.metrics for r in rows)]
    header = ["trial", "state", "value", *names, "epochs", "duration", *(t for _, t in speed), *(t for _, t in deploy),
              "worker", "MLflow run"]  # fmt: skip
    lines = []
    for r in rows:
        cells = [
            _cell(r.number), _cell(r.state), _cell(r.value, f"{r.value:.5g}" if r.value is not None else "-"),
            *(_cell(r.params.get(n), _short(r.params.get(n))) for n in names), _cell(r.epochs),
            _cell(r.duration_seconds, "-" if r.duration_seconds is None else seconds_text(r.duration_seconds)),
            *(_cell(r.extra.get(key), _short(r.extra.get(key))) for key, _ in speed),
            *(_cell(r.metrics.get(key), _short(r.metrics.get(key))) for key, _ in deploy),
            _cell(r.worker or "-"),
            f'<td data-sort="{html.escape(r.mlflow_run_id or "")}">{run_link(r.mlflow_run_id)}</td>',
        ]  # fmt: skip
        lines.append(f'<tr class="{html.escape(r.state.lower())}">{"".join(cells)}</tr>')
    # Long parameter names may break after an underscore, so a dozen parameters fit a 1280 px screen.
    head = "".join(f'<th data-col="{i}" title="sort">{html.escape(h).replace("_", "_<wbr>")}</th>'
                   for i, h in enumerate(header))  # fmt: skip
    # In a box that scrolls both ways: its horizontal scrollbar stays in view and the header sticks.
    return (f'<div class="table-scroll"><table class="trials sortable"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(lines)}</tbody></table></div><script>{_SORT_JS}</script>')  # fmt: skip


def seconds_text(seconds: float) -> str:
    """Like :func:`duration`, with a decimal under ten seconds (a small search's trials take less than one)."""
    from search.observation._progress import duration

    return f"{seconds:.1f}s" if seconds < 9.95 else duration(seconds)


def _cell(value: Any, shown: str | None = None) -> str:
    """A cell that sorts by ``value`` (numbers as numbers) and shows ``shown``."""
    key = "" if value is None else str(value)
    text = key if shown is None else shown
    return f'<td data-sort="{html.escape(key)}">{html.escape(text)}</td>'


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else ("-" if value is None else str(value))


def mlflow_run_link(loc: Locations | None, experiment_id: str | None) -> Any:
    """Links into an MLflow server's UI when tracking is one; the run id as text otherwise."""
    import storage

    server = None
    if loc is not None and storage.TrackingLocation(loc.tracking_uri, loc.artifact_location).is_server:
        server = _web_address(loc.tracking_uri)

    def link(run_id: str | None) -> str:
        if not run_id:
            return "-"
        if server is None or experiment_id is None:  # the first 8 characters find it; the whole id on hover
            return f'<code title="{html.escape(run_id)}">{html.escape(run_id[:8])}</code>'
        url = f"{server}/#/experiments/{experiment_id}/runs/{run_id}"
        return f'<a href="{html.escape(url)}">{html.escape(run_id[:8])}</a>'

    return link


def _web_address(tracking_uri: str) -> str | None:
    """The server's UI address without credentials (the page is shared and kept on MLflow); None when
    tracking is not an http(s) server (``databricks`` names a profile, not an address)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")).rstrip("/")


def failures_note(reasons: list[tuple[str, int]]) -> str:
    """``reasons``: :func:`failure_reasons` of the study's rows."""
    if not reasons:
        return "No failed trials."
    return "; ".join(f"{count} × {reason}" for reason, count in reasons)


def failures_table(reasons: list[tuple[str, int]]) -> str:
    if not reasons:
        return ""
    body = "".join(f"<tr><td>{count}</td><td>{html.escape(reason)}</td></tr>" for reason, count in reasons)
    return (
        f'<table class="failures"><thead><tr><th>trials</th><th>reason</th></tr></thead><tbody>{body}</tbody></table>'
    )


def seconds_saved(rows: list[TrialRow], search_epochs: int) -> tuple[float, float]:
    """Training time pruning saved and the time the search trained, in seconds (an estimate: each
    pruned trial's own seconds per epoch times the epochs it did not run).

    A retry that resumed from a checkpoint trained only the epochs after it in ``fit_seconds``.
    """
    saved = spent = 0.0
    for r in rows:
        trained = r.epochs - int(r.extra.get("resumed_from_epoch") or 0)
        if r.state not in ("COMPLETE", "PRUNED") or not r.fit_seconds or trained <= 0:
            continue
        spent += float(r.fit_seconds)
        if r.state == "PRUNED":
            saved += float(r.fit_seconds) / trained * max(0, search_epochs - r.epochs)
    return saved, spent


def champion_note(champion: Champion | None, best_trial: int | None) -> str:
    if champion is None:
        return "Not retrained yet: `search retrain` (or the end of `search start`) registers the best trial."
    metrics = ", ".join(f"{k} {v:.4g}" for k, v in sorted(champion.test_metrics.items())) or "no test metrics"
    source = "" if champion.source_trial is None else f" (retrained trial {champion.source_trial}"
    if source and best_trial is not None and champion.source_trial != best_trial:
        source += f"; the best trial is now {best_trial}"
    exports = ", ".join(f"{fmt} {state}" for fmt, state in sorted(champion.exports.items()))
    return (f"Registered model {champion.model_name} version {champion.version}{source + ')' if source else ''}: "
            f"{metrics}." + (f" Exports: {exports}." if exports else ""))  # fmt: skip


def slice_section(study: optuna.Study, metric: str, complete: int, target: Any = None,
                  ranked: Any = None) -> Section:  # fmt: skip
    """Slice plots of the (up to three) most important parameters; of the first ones if too few trials.
    ``target``: the value to plot (the first objective of several); ``ranked``: it, low is good."""
    import optuna.visualization as vis

    title = "Most important parameters"
    if complete == 0:
        return Section("slices", title, "No complete trial yet.")
    names = list(next(t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE").params)
    note = f"{metric} against each of the first {SLICE_PARAMS} parameters, one dot per complete trial."
    if complete >= 3:
        try:
            from optuna.importance import get_param_importances

            with warnings.catch_warnings():  # that PED-ANOVA ranks low target values first: ``ranked`` does
                warnings.simplefilter("ignore", UserWarning)
                names = list(get_param_importances(study, target=ranked))
            note = (f"{metric} against each of the {SLICE_PARAMS} most important parameters (fANOVA), one dot per "
                    "complete trial.")  # fmt: skip
        except (ValueError, RuntimeError):
            pass
    figure = vis.plot_slice(study, params=names[:SLICE_PARAMS], target=target, target_name=metric)
    return Section("slices", title, note, figure)


def champion_section(coordinator: Coordinator, loc: Locations, study: optuna.Study) -> Section:
    from search.tracking import Tracker, read_champion

    champion = read_champion(Tracker(loc.tracking()), coordinator.study_name)
    from search.settings import champion_number

    record = coordinator.read_record()
    best = champion_number(study.get_trials(deepcopy=False), record.maximize(), record.settings.select)
    return Section("champion", "Champion model", champion_note(champion, best))


def worker_timeline(trials: list[FrozenTrial]) -> Figure:
    import plotly.graph_objects as go

    now = datetime.now()
    fig = go.Figure()
    for state in STATE_COLORS:
        rows = [t for t in trials if t.state.name == state and t.datetime_start is not None]
        if not rows:
            continue
        ends = [t.datetime_complete or now for t in rows]
        fig.add_trace(go.Bar(
            base=[t.datetime_start.isoformat() for t in rows],  # type: ignore[union-attr]
            x=[1000 * (e - t.datetime_start).total_seconds() for t, e in zip(rows, ends, strict=True)],  # type: ignore[operator]
            y=[str(t.user_attrs.get("worker", "unknown")) for t in rows], orientation="h", name=state.lower(),
            marker_color=STATE_COLORS[state], text=[str(t.number) for t in rows], textposition="inside",
            insidetextanchor="middle",
            hovertemplate="trial %{text}<br>%{y}<extra>" + state.lower() + "</extra>",
        ))  # fmt: skip
    fig.update_layout(barmode="overlay", xaxis={"type": "date", "title": "time"}, yaxis_title="worker",
                      template="plotly_white")  # fmt: skip
    return fig


_SORT_JS = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th) {
    th.addEventListener("click", function () {
      var col = +th.dataset.col, body = table.tBodies[0], rows = Array.from(body.rows);
      var ascending = th.dataset.order !== "asc";
      table.querySelectorAll("th").forEach(function (h) { delete h.dataset.order; });
      th.dataset.order = ascending ? "asc" : "desc";
      function key(row) {
        var text = row.cells[col].dataset.sort || "", number = parseFloat(text);
        return text !== "" && !isNaN(number) && isFinite(text) ? number : text;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === "" || y === "") { return x === y ? 0 : (x === "" ? 1 : -1); }
        var order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""
