"""Population-based training in the report: which trial copied which, when, and the winner's schedule."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from search.observation._report_tables import Section

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from search.settings import StudyRecord


def lineage_section(trials: list[FrozenTrial], record: StudyRecord) -> Section | None:
    """A figure of every attempt's own epochs, a dashed line from each copy to the checkpoint it
    went on from, the best trial's lineage drawn thick; None for a study without copies."""
    import plotly.graph_objects as go
    from optuna.trial import TrialState

    from search.settings._freeze_thaw import lineage

    copies = [t for t in trials if "pbt_parent" in t.user_attrs]
    if not copies:
        return None
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    sign = -1 if record.direction == "maximize" else 1
    best = min(complete, key=lambda t: sign * float(t.value or 0)) if complete else None
    chain = _chain(trials, best) if best is not None else set()
    fig = go.Figure()
    for trial in trials:
        start = int(trial.user_attrs.get("pbt_epoch", 0))
        steps = sorted(s for s in trial.intermediate_values if s > start or (start and s == start))
        if not steps:
            continue
        thick = trial.number in chain
        fig.add_trace(go.Scatter(
            x=steps, y=[trial.intermediate_values[s] for s in steps], mode="lines+markers", showlegend=False,
            line={"width": 4 if thick else 1.2, "color": "#d62728" if thick else "#7f7f7f",
                  "dash": "dash" if start else "solid"},
            marker={"size": 5}, hovertemplate=_hover(trial) + "<br>epoch %{x}: %{y:.4g}<extra></extra>",
        ))  # fmt: skip
    note = (f"Population-based training: {len(copies)} copies. Each line is the epochs one attempt trained "
            f"({record.metric} after each); a dashed line starts at the checkpoint a copy went on from, with the "
            "parameters it changed (hover).")  # fmt: skip
    if best is not None:
        schedule = lineage(trials, best)
        if len(schedule) == 1:
            note += f" Thick: the best trial {best.number}, which trained with its own parameters throughout."
        else:
            changed = [k for k in schedule[0][1] if len({json.dumps(p.get(k)) for _, p in schedule}) > 1]
            steps_text = "; ".join(f"from epoch {epoch + 1}, " + ", ".join(f"{k}={_short(p.get(k))}" for k in changed)
                                   for epoch, p in schedule)  # fmt: skip
            note += (f" Thick: the best trial {best.number}'s lineage, whose schedule the retrain replays: "
                     f"{steps_text}.")  # fmt: skip
    fig.update_layout(xaxis_title="epoch", yaxis_title=record.metric, template="plotly_white")
    return Section("lineage", "Population-based training", note, fig)


def _chain(trials: list[FrozenTrial], best: FrozenTrial) -> set[int]:
    """The numbers of the attempts whose epochs trained ``best``'s weights."""
    from search.settings._freeze_thaw import trained_at

    numbers, attempt = {best.number}, best
    while "pbt_epoch" in attempt.user_attrs:
        attempt = trained_at(trials, int(attempt.user_attrs["pbt_parent"]), int(attempt.user_attrs["pbt_epoch"]))
        numbers.add(attempt.number)
    return numbers


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _hover(trial: FrozenTrial) -> str:
    base = f"trial {trial.number}"
    if "pbt_parent" not in trial.user_attrs:
        return base
    changes = ", ".join(
        f"{k} {_short(a)} → {_short(b)}" for k, (a, b) in trial.user_attrs.get("pbt_changes", {}).items()
    )
    return f"{base}: copy of trial {trial.user_attrs['pbt_parent']} at epoch {trial.user_attrs['pbt_epoch']}" + (
        f" ({changes})" if changes else ""
    )
