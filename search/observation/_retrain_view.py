"""What ``search start`` and ``search retrain`` show while the best trial is retrained: the epochs
with a bar and an ETA on a terminal (a line about every tenth of them elsewhere), then a line for
each phase as it ends (trained, tested, exported, registered)."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from search.observation._progress import duration


class RetrainView:
    """A :class:`search.tracking.RetrainProgress` that prints; silent when ``quiet``."""

    def __init__(self, metric: str, quiet: bool = False, terminal: bool | None = None) -> None:
        self.metric, self.quiet = metric, quiet
        self.terminal = sys.stdout.isatty() if terminal is None else terminal
        self.epochs, self.every, self.started_at = 0, 1, 0.0
        self._bar: Any = None

    def started(self, trial: int, epochs: int) -> None:
        self.epochs, self.every, self.started_at = epochs, max(1, round(epochs / 10)), time.monotonic()
        if self.quiet:
            return
        print(f"\nretraining trial {trial} at full scale ({epochs} epochs), then test, export, register", flush=True)
        if self.terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("  epoch"), MofNCompleteColumn(), BarColumn(),
                                 TextColumn("{task.fields[value]}"), TimeRemainingColumn(), transient=True)  # fmt: skip
            self._task = self._bar.add_task("retrain", total=epochs, value="")
            self._bar.start()

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        if self.quiet:
            return False
        value = metrics.get(self.metric)
        shown = "" if value is None else f"{self.metric} {value:.4g}"
        if self._bar is not None:
            self._bar.update(self._task, completed=epoch, value=shown)
        elif epoch % self.every == 0 or epoch == self.epochs:
            elapsed = time.monotonic() - self.started_at
            left = elapsed / epoch * (self.epochs - epoch)
            print(f"  epoch {epoch}/{self.epochs}  {shown}  elapsed {duration(elapsed)}  ETA {duration(left)}",
                  flush=True)  # fmt: skip
        return False

    def done(self, step: str, detail: str, seconds: float) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if not self.quiet:
            print(f"  {step}: {detail} ({seconds:.1f} s)", flush=True)
