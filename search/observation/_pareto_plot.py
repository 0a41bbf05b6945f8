"""A multi-objective study in the report: its trials on the first two objectives, the Pareto front
of the feasible ones joined up, the champion (``--select``) marked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.observation._report_tables import Section

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from search.settings import StudyRecord


def pareto_section(trials: list[FrozenTrial], record: StudyRecord) -> Section | None:
    """The scatter of complete trials on the first two objectives; None for a single-objective study."""
    import plotly.graph_objects as go

    from search.settings import champion_number, pareto_front
    from search.settings._selection import candidates

    goals = record.goals()
    if len(goals) < 2:
        return None
    found = candidates(trials)
    title = "Pareto front"
    if not found:
        return Section("pareto", title, "No complete trial yet.")
    front = {c.number for c in pareto_front(found, record.maximize())}
    champion = champion_number(trials, record.maximize(), record.settings.select)
    fig = go.Figure()
    groups = (("Pareto front", lambda c: c.number in front, "#1f77b4"),
              ("dominated", lambda c: c.feasible and c.number not in front, "#9ecae1"),
              ("infeasible", lambda c: not c.feasible, "#bdbdbd"))  # fmt: skip
    for name, keep, color in groups:
        points = sorted((c for c in found if keep(c)), key=lambda c: c.values[:2])
        if points:
            fig.add_trace(go.Scatter(
                x=[c.values[0] for c in points], y=[c.values[1] for c in points], name=name,
                mode="lines+markers" if name == "Pareto front" else "markers", marker={"color": color, "size": 8},
                text=[f"trial {c.number}" for c in points], hovertemplate="%{text}<br>%{x:.4g}, %{y:.4g}",
            ))  # fmt: skip
    chosen = [c for c in found if c.number == champion]
    if chosen:
        star = {"symbol": "star", "size": 18, "color": "#d62728"}
        fig.add_trace(go.Scatter(x=[chosen[0].values[0]], y=[chosen[0].values[1]], mode="markers", marker=star,
                                 name=f"champion (trial {champion})"))  # fmt: skip
    fig.update_layout(xaxis_title=f"{goals[0].metric} ({goals[0].direction})", template="plotly_white",
                      yaxis_title=f"{goals[1].metric} ({goals[1].direction})")  # fmt: skip
    kept = f"; grey trials miss a constraint ({', '.join(record.constraints)})" if record.constraints else ""
    more = f" (of {len(goals)} objectives, the first two are drawn)" if len(goals) > 2 else ""
    note = (f"Each dot is a complete trial{more}; the line joins the Pareto front of the trials that meet every "
            f"constraint{kept}. The star is the champion, picked by --select {record.settings.select}.")  # fmt: skip
    return Section("pareto", title, note, fig)
