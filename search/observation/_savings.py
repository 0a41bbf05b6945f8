"""What the search did not have to run: epochs the pruner saved and epochs early stopping
(``--patience``) saved, told apart, and what happened to every trial in words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from search.observation._report_tables import STATE_COLORS, Section, seconds_text

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

STOPPED_COLOR = "#2ca02c"


@dataclass(frozen=True)
class EpochSavings:
    """Epochs the complete and pruned trials ran against ``trials x search_epochs``, had each run them all."""

    trials: int
    search_epochs: int
    epochs_run: int
    by_pruner: int
    """Search epochs the pruned trials did not run."""
    by_patience: int
    """Search epochs the complete trials that ``--patience`` ended early did not run."""
    pruned: int = 0
    stopped: int = 0

    @property
    def possible(self) -> int:
        return self.trials * self.search_epochs

    def share(self, epochs: int) -> float:
        return epochs / self.possible if self.possible else 0.0


def stopped_early(trial: FrozenTrial) -> bool:
    """A complete trial that ``--patience`` ended before its last search epoch."""
    return trial.state.name == "COMPLETE" and "stopped_epoch" in trial.user_attrs


def epochs_run(trial: FrozenTrial) -> int:
    return int(trial.user_attrs.get("epochs_run", trial.last_step or 0))


def epoch_savings(trials: list[FrozenTrial], search_epochs: int) -> EpochSavings:
    """Over the complete and pruned trials; failed trials were stopped by errors, not to save time."""
    decided = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    pruned = [t for t in decided if t.state.name == "PRUNED"]
    stopped = [t for t in decided if stopped_early(t)]
    return EpochSavings(
        trials=len(decided), search_epochs=search_epochs, epochs_run=sum(epochs_run(t) for t in decided),
        by_pruner=sum(max(0, search_epochs - epochs_run(t)) for t in pruned),
        by_patience=sum(max(0, search_epochs - epochs_run(t)) for t in stopped), pruned=len(pruned),
        stopped=len(stopped),
    )  # fmt: skip


def _trials(count: int) -> str:
    return f"{count} trial{'s' * (count != 1)}"


def pruner_name(spec: str) -> str:
    """``median`` of ``median:startup=2,warmup=0`` (the summary table shows the options)."""
    return spec.split(":", 1)[0]


def savings_note(savings: EpochSavings, pruner: str) -> str:
    s = savings
    note = (f"The search ran {s.epochs_run:,} of the {s.possible:,} epochs its {_trials(s.trials)} (complete and "
            f"pruned) would have run had each gone all {s.search_epochs} search epochs. ")  # fmt: skip
    if s.pruned:
        note += (f"The {pruner_name(pruner)} pruner saved {s.by_pruner:,} epochs ({100 * s.share(s.by_pruner):.0f}%) "
                 f"by pruning {_trials(s.pruned)}; ")  # fmt: skip
    else:
        note += f"The {pruner_name(pruner)} pruner pruned no trial; "
    if s.stopped:
        note += (f"early stopping (--patience) saved {s.by_patience:,} ({100 * s.share(s.by_patience):.0f}%) by "
                 f"ending {_trials(s.stopped)} early, complete.")  # fmt: skip
    else:
        note += "early stopping (--patience) ended no trial early."
    return note + " Failed trials are left out."


def savings_section(trials: list[FrozenTrial], search_epochs: int, pruner: str,
                    seconds: tuple[float, float] = (0.0, 0.0)) -> Section:  # fmt: skip
    import plotly.graph_objects as go

    savings = epoch_savings(trials, search_epochs)
    decided = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    labels = [f"trial {t.number}" for t in decided]
    run = [epochs_run(t) for t in decided]
    left = [max(0, search_epochs - r) for r in run]
    fig = go.Figure([
        go.Bar(x=labels, y=run, name="epochs run", marker_color=[STATE_COLORS[t.state.name] for t in decided]),
        go.Bar(x=labels, y=[n if t.state.name == "PRUNED" else 0 for t, n in zip(decided, left, strict=True)],
               name="saved by the pruner", marker_color="#d9d9d9"),
        go.Bar(x=labels, y=[n if stopped_early(t) else 0 for t, n in zip(decided, left, strict=True)],
               name="saved by early stopping", marker_color=STOPPED_COLOR, opacity=0.35),
    ])  # fmt: skip
    fig.update_layout(barmode="stack", yaxis_title="epochs", template="plotly_white")
    note = savings_note(savings, pruner) + _time_saved(savings, *seconds)
    return Section("savings", "Compute saved by pruning and early stopping", note, fig)


def _time_saved(savings: EpochSavings, saved: float, spent: float) -> str:
    if saved > 0:
        return (f" In training time the pruner saved about {seconds_text(saved)}, {100 * saved / (saved + spent):.0f}% "
                f"of the {seconds_text(saved + spent)} the trials would have trained unpruned (an estimate from each "
                "pruned trial's own seconds per epoch).")  # fmt: skip
    if savings.by_pruner > 0:
        return " The training time saved cannot be estimated: no pruned trial recorded its training time."
    return f" In training time the pruner saved nothing (the trials trained {seconds_text(spent)})." if spent else ""


def outcomes_note(trials: list[FrozenTrial], search_epochs: int, pruner: str) -> str:
    """What happened to every trial so far, counted (the learning curves' caption)."""
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    stopped = sum(1 for t in complete if stopped_early(t))

    def count(state: str) -> int:
        return sum(1 for t in trials if t.state.name == state)

    parts = [
        (len(complete) - stopped, f"complete after all {search_epochs} search epochs (blue)"),
        (stopped, "complete, ended early by --patience after epochs without improvement (blue, shorter)"),
        (count("PRUNED"), f"pruned by the {pruner_name(pruner)} pruner (orange, ending in ×)"),
        (count("FAIL"), "failed (red)"),
        (count("RUNNING"), "running (grey)"),
    ]  # fmt: skip
    said = "; ".join(f"{n} {text}" for n, text in parts if n)
    return f"Of {_trials(len(trials))}: {said}." if said else "No trial has started yet."


def log_axis_if_wide(values: list[float]) -> bool:
    """Whether positive values span more than a decade, where a linear axis squashes the small ones."""
    finite = [v for v in values if v == v and v not in (float("inf"), float("-inf"))]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 10
