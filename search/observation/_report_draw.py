"""Which trials the report draws when a study is too large to draw them all, and which curve points.

At 100,000 trials a page that draws every trial's curve and lists every trial is 111 MB and took ten
minutes to write. Past ``REPORT_TRIALS`` trials the page draws that many: every trial that improved
on the best so far (so the optimization history's best line is the study's own), the best ones,
the running ones and the rest evenly spaced in trial order (so the proportions stay the study's);
its table lists the best ``REPORT_TRIALS`` by the objective, and each section says what it shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial
    from plotly.graph_objects import Figure

    from search.coordination import Coordinator

REPORT_TRIALS = 1000
"""The most trials one page draws (and lists); a study with more is drawn from a sample."""
BEST_DRAWN = 100
"""Of those, the best complete trials, always drawn."""
CURVE_POINTS = 100
"""The most points one learning curve is drawn with (the first and the last always among them)."""


@dataclass(frozen=True)
class Drawn:
    """The trials a page draws and how they were chosen."""

    trials: list[FrozenTrial]
    limit: int
    """``REPORT_TRIALS`` when drawn: the page lists that many."""
    total: int
    """Trials in the study."""
    note: str
    """What was drawn, for the sections' captions."""


def choose(objectives: list[tuple[int, int, str, float | None]], maximize: bool, limit: int = REPORT_TRIALS,
           best: int = BEST_DRAWN) -> list[int]:  # fmt: skip
    """Ids to draw of ``(trial_id, number, state, value)`` in trial order: every one if there are at most
    ``limit``; else the improvements on the best so far, the ``best`` best complete trials, the running
    ones, and the rest evenly spaced in trial order, ``limit`` in all (more only if those must-haves are
    more), in trial order."""
    if len(objectives) <= limit:
        return [tid for tid, *_ in objectives]
    sign = -1.0 if maximize else 1.0
    complete = [(tid, sign * v) for tid, _, state, v in objectives if state == "COMPLETE" and v is not None]
    records, so_far = [], math.inf
    for tid, v in complete:
        if v < so_far:
            records.append(tid)
            so_far = v
    ranked = sorted(complete, key=lambda item: item[1])[:best]  # stable: ties in trial order
    running = [tid for tid, _, state, _ in objectives if state == "RUNNING"]
    must = dict.fromkeys([*records, *(tid for tid, _ in ranked), *running])
    rest = [tid for tid, *_ in objectives if tid not in must]
    room = max(1, limit - len(must))
    if room >= len(rest):
        picked = rest
    else:  # evenly spaced, the first and the last of the rest among them
        picked = [rest[round(i * (len(rest) - 1) / max(1, room - 1))] for i in range(room)]
    chosen = set(must) | set(picked)
    return [tid for tid, *_ in objectives if tid in chosen]


def draw(coordinator: Coordinator, maximize: bool) -> Drawn | None:
    """A sample of a study of more than ``REPORT_TRIALS`` trials, read in full (see :func:`choose`);
    None for a smaller study, which the page draws whole."""
    import storage as st

    if coordinator.counts().total <= REPORT_TRIALS:
        return None
    with coordinator.storage.engine.connect() as conn:
        objectives = st.trial_objectives(conn, coordinator.study_id())
    ids = choose(objectives, maximize, REPORT_TRIALS, BEST_DRAWN)
    found = st.read_some(coordinator.storage, ids)
    trials = [found[tid] for tid in ids if tid in found]
    note = (f" Drawn from {len(trials):,} of the study's {len(objectives):,} trials: every trial that improved on "
            f"the best so far, the {BEST_DRAWN} best, the running ones and an even sample of the rest in trial "
            "order.")  # fmt: skip
    return Drawn(trials, REPORT_TRIALS, len(objectives), note)


def curve_steps(steps: list[int], most: int = CURVE_POINTS) -> list[int]:
    """``steps`` (sorted) thinned to at most ``most`` evenly spaced ones, the first and the last kept."""
    if len(steps) <= most:
        return steps
    picks = {round(i * (len(steps) - 1) / (most - 1)) for i in range(most)}
    return [steps[i] for i in sorted(picks)]


def history_figure(trials: list[FrozenTrial], maximize: bool, metric: str) -> Figure:
    """Optuna's optimization history of a sample: each complete trial's value by its number, and the best
    so far (Optuna's own plot indexes values by trial number, so it draws only a whole study)."""
    import plotly.graph_objects as go

    complete = [t for t in trials if t.state.name == "COMPLETE" and t.value is not None]
    pick = max if maximize else min
    best: list[float] = []
    for t in complete:
        best.append(float(t.value) if not best else pick(best[-1], float(t.value)))  # type: ignore[arg-type]
    numbers = [t.number for t in complete]
    figure = go.Figure([
        go.Scatter(x=numbers, y=[t.value for t in complete], mode="markers", name=metric),
        go.Scatter(x=numbers, y=best, mode="lines", name="Best Value"),
    ])  # fmt: skip
    figure.update_layout(xaxis_title="Trial", yaxis_title=metric)
    return figure
