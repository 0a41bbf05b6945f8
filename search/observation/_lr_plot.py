"""The plot of ``search lr-find``: loss against learning rate, the suggestion and the range."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plotly.graph_objects import Figure

    from trainer import LRRange


def lr_find_figure(found: LRRange, study: str) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure([
        go.Scatter(x=found.lrs, y=found.raw_losses, mode="lines", name="loss", line={"color": "#c7c7c7"}),
        go.Scatter(x=found.lrs, y=found.losses, mode="lines", name="smoothed loss", line={"color": "#1f77b4"}),
    ])  # fmt: skip
    fig.add_vrect(x0=found.low, x1=found.high, fillcolor="#2ca02c", opacity=0.12, line_width=0,
                  annotation_text="range to search", annotation_position="top left")  # fmt: skip
    fig.add_vline(x=found.suggested, line_dash="dash", line_color="#d62728",
                  annotation_text=f"suggested {found.suggested:.2g}")  # fmt: skip
    top = min(max(found.losses) * 1.1, 3 * found.losses[0]) if found.losses else None
    fig.update_layout(
        title=f"{study}: learning-rate range test ({found.stopped})", template="plotly_white",
        xaxis={"type": "log", "title": "learning rate"},
        yaxis={"title": "training loss", "range": None if top is None else [0, top]},
    )  # fmt: skip
    return fig
