"""The live view of ``search start`` on a terminal (rich), redrawn from one :class:`Snapshot` a second."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from search.observation._progress import Snapshot, duration, snapshot
from storage import StudyTrials

if TYPE_CHECKING:
    from search.coordination import Coordinator
    from search.settings import StudyRecord

MAX_ROWS = 16
"""Running trials listed one per row; a search on many GPUs shows the first ones and a count."""


def render(snap: Snapshot, elapsed: float, problem: str = "", hints: tuple[str, ...] = ()) -> RenderableType:
    """The whole view: progress bar, counts, best value and params, rate, running trials, recent
    failures with their reasons, and where to look further (``hints``)."""
    bar = Table.grid(expand=True, padding=(0, 1))
    bar.add_column(ratio=1)
    bar.add_column(justify="right", no_wrap=True)
    bar.add_row(ProgressBar(total=max(1, snap.budget), completed=snap.finished),
                Text(f"{snap.finished}/{snap.budget} finished", style="bold"))  # fmt: skip
    parts: list[RenderableType] = [bar, _counts(snap), _pace(snap, elapsed)]
    if snap.best_params:
        shown = "  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in snap.best_params.items())
        parts.append(Text.assemble(("best params ", "dim"), shown))
    if snap.running_trials:
        parts.append(_running_table(snap))
    for number, reason in snap.recent_failures:
        parts.append(Text.assemble((f"trial {number} failed: ", "red"), reason[:200]))
    if problem:
        parts.append(Text(problem, style="yellow"))
    if hints:
        parts.append(Text("  ·  ".join(hints), style="dim"))
    title = Text.assemble((snap.study, "bold"), f" · {snap.direction} {snap.metric}")
    return Panel(Group(*parts), title=title, title_align="left", border_style="blue")


def _counts(snap: Snapshot) -> Text:
    text = Text()
    for label, value, style in (
        ("complete", snap.complete, "green"), ("pruned", snap.pruned, "yellow"),
        ("failed", snap.failed, "red" if snap.failed else ""), ("running", snap.running, "cyan"),
        ("waiting", snap.waiting, ""),
    ):  # fmt: skip
        text.append(f"{label} ").append(str(value), style=f"bold {style}".strip()).append("   ")
    if snap.retried:
        text.append(f"(retried {snap.retried})", style="dim")
    return text


def _pace(snap: Snapshot, elapsed: float) -> Text:
    text = Text("best ")
    if snap.best_value is None:
        text.append("-", style="bold")
    else:
        text.append(f"{snap.best_value:.5g}", style="bold green").append(f" (trial {snap.best_trial})")
    eta = "-" if snap.eta_seconds is None else duration(snap.eta_seconds)
    text.append(f"   {snap.trials_per_minute:.1f} trials/min   ETA ").append(eta, style="bold")
    return text.append(f"   elapsed {duration(elapsed)}", style="dim")


def _running_table(snap: Snapshot) -> Table:
    table = Table(box=None, padding=(0, 1), header_style="dim", pad_edge=False)
    done = "folds" if snap.folds else "epoch"  # k-fold: the folds a trial finished
    for name, justify in (("trial", "right"), ("worker", "left"), ("host", "left"), (done, "right"),
                          ("running", "right")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for trial in snap.running_trials[:MAX_ROWS]:
        # Text, not str: a worker id like ``host:1234:0`` is not markup or an :emoji: code.
        done = f"{trial.epoch}/{snap.folds or snap.search_epochs}"
        cells = (str(trial.number), trial.worker or "?", trial.host or "?", done, duration(trial.seconds))
        table.add_row(*(Text(cell) for cell in cells))
    hidden = len(snap.running_trials) - MAX_ROWS
    if hidden > 0:
        table.add_row("", f"... and {hidden} more", "", "", "")
    return table


class LiveFollower:
    """Redraws the view in place each time it is called; the last view stays on screen when closed."""

    def __init__(self, coordinator: Coordinator, console: Console | None = None, hints: tuple[str, ...] = ()) -> None:
        self.coordinator = coordinator
        self.hints = hints
        self.started = time.time()
        self.last: Snapshot | None = None
        self.seen = StudyTrials(coordinator.storage, coordinator.study_id())  # finished trials read once
        self.record: StudyRecord | None = None
        self.live = Live(console=console, auto_refresh=False, redirect_stdout=True, redirect_stderr=True)
        self.live_started = False

    def __call__(self) -> None:
        problem = ""
        try:
            self.record = self.record or self.coordinator.read_record()
            self.last = snapshot(self.coordinator, self.started, self.seen, self.record)
        except Exception as exc:  # a database blip must not stop following
            problem = f"cannot read the study right now ({type(exc).__name__}); retrying"
        if self.last is None:
            return
        if not self.live_started:
            self.live.start()
            self.live_started = True
        self.live.update(render(self.last, time.time() - self.started, problem, self.hints), refresh=True)

    def close(self) -> None:
        if self.live_started:
            self.live.stop()
            self.live_started = False
