"""Following a running search: the live view on a terminal, plain lines otherwise."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Protocol

from search.observation._progress import duration, snapshot
from search.observation._trials import TrialRow, trial_row
from storage import StudyTrials

if TYPE_CHECKING:
    from search.coordination import Coordinator


class Follower(Protocol):
    """Called about once a second while a search runs, then closed once."""

    def __call__(self) -> None: ...

    def close(self) -> None: ...


class PlainFollower:
    """For logs and non-terminal output: one line per trial that finishes, then where the study stands.

    Nothing is printed for a poll that saw no trial finish; trials that had finished before the
    follower started (a resumed study) are summed up in the first line, not listed.
    """

    def __init__(self, coordinator: Coordinator, quiet: bool = False) -> None:
        self.coordinator = coordinator
        self.quiet = quiet
        self.started = time.time()
        self.seen: set[int] | None = None
        self.problem = False
        self.trials: StudyTrials | None = None  # finished trials are read once, not at every poll

    def __call__(self) -> None:
        if self.quiet:
            return
        try:
            if self.trials is None:
                self.trials = StudyTrials(self.coordinator.storage, self.coordinator.study_id())
            rows = [trial_row(t) for t in self.trials.refresh()]
            finished = [r for r in rows if r.state in FINISHED]
            fresh = [] if self.seen is None else [r for r in finished if r.number not in self.seen]
            first = self.seen is None
            self.seen = {r.number for r in finished}
            lines = [finished_line(r) for r in fresh]
            if first or fresh:
                lines.append(snapshot(self.coordinator, self.started, self.trials).line())
        except Exception as exc:  # a database blip must not stop following
            if not self.problem:
                print(f"(cannot read the study right now: {type(exc).__name__}; retrying)", flush=True)
            self.problem = True
            return
        self.problem = False
        if lines:
            print("\n".join(lines), flush=True)

    def close(self) -> None:
        pass


FINISHED = ("COMPLETE", "PRUNED", "FAIL")


def finished_line(row: TrialRow) -> str:
    """``trial 7 COMPLETE 0.1234 after 15 epochs in 42s on host:123:0``; ``trial 8 PRUNED at epoch 3 ...``;
    a failure with the first line of its reason."""
    took = "" if row.duration_seconds is None else f" in {duration(row.duration_seconds)}"
    where = f" on {row.worker}" if row.worker else ""
    if row.state == "PRUNED":
        # Freeze-thaw: a worker may resume it; population-based training: a copy of a better one goes on.
        paused = "PAUSED" if "paused_at" in row.extra else "REPLACED" if "exploited_at" in row.extra else "PRUNED"
        evicted = " (paused, its checkpoint evicted: asha:disk)" if "paused_evicted" in row.extra else ""
        if row.folds is not None:  # k-fold: pruned after a fold (its value, at step = fold, was compared)
            return f"trial {row.number} {paused} after {len(row.folds)} folds ({row.epochs} epochs){took}{where}"
        return f"trial {row.number} {paused} at epoch {row.epochs}{evicted}{took}{where}"
    if row.state == "COMPLETE":
        value = "" if row.value is None else f" {row.value:.5g}"
        folds = "" if row.folds is None else f" (mean of {len(row.folds)} folds)"
        return f"trial {row.number} COMPLETE{value}{folds} after {row.epochs} epochs{took}{where}"
    reason = (row.fail_reason or "no reason recorded").strip().splitlines() or [""]
    return f"trial {row.number} FAIL after {row.epochs} epochs{took}{where}: {reason[0][:160]}"


def make_follower(coordinator: Coordinator, quiet: bool, hints: tuple[str, ...] = ()) -> Follower:
    """The live view on a terminal (with ``hints`` on where to look further), plain lines otherwise,
    nothing at all when ``quiet``."""
    if quiet or not _is_terminal():
        return PlainFollower(coordinator, quiet)
    from search.observation._live import LiveFollower

    return LiveFollower(coordinator, hints=hints)


def _is_terminal() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb"
