"""What ``fit`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainer._mutation import Mutation


@dataclass(frozen=True)
class FitResult:
    """Outcome of one call to :func:`trainer.fit`."""

    epochs_run: int
    """Last epoch trained (1-based), counting epochs restored from a checkpoint."""
    stopped_early: bool
    """True when a hook asked to stop before ``config.epochs``."""
    stopped_epoch: int | None
    """The epoch after which a hook asked to stop, else ``None`` (may be the last epoch, when
    ``stopped_early`` is False: the run was complete anyway)."""
    best_epoch: int
    """Epoch with the lowest validation loss."""
    best_val_loss: float
    history: list[dict[str, float]] = field(default_factory=list)
    """One dict of metrics per epoch trained in this call (``epoch`` key included)."""
    effective_batch_size: int = 0
    """per-device batch x processes x accumulation steps."""
    samples_per_second: float = 0.0
    """Training samples per second over this call, validation excluded."""
    fit_seconds: float = 0.0
    """Wall time of this call."""
    callback_seconds: float = 0.0
    """Part of ``fit_seconds`` spent in the caller's hooks and metrics sink (main process)."""
    resumed_from_epoch: int = 0
    """Epoch of the checkpoint this call resumed from (0 = started fresh)."""
    resumed_metrics: dict[str, float] = field(default_factory=dict)
    """The metrics of that checkpoint's epoch, as ``history`` has them; empty when the call started
    fresh or the checkpoint predates them. A call that resumed after the last epoch trains nothing:
    its ``history`` is empty and these are its model's final metrics."""
    resumed_curve: dict[int, dict[str, float]] = field(default_factory=dict)
    """The metrics of every epoch up to ``resumed_from_epoch``, by epoch, as the checkpoint kept them
    (a checkpoint written before it kept them: its own epoch's only), so that a caller can report
    the epochs an earlier attempt trained but never reported."""
    best_checkpoint: Path | None = None
    """Checkpoint file of ``best_epoch`` when checkpointing was on."""
    mutations: tuple[Mutation, ...] = ()
    """Every hyperparameter change of this run's lineage, oldest first: those the resumed checkpoint
    carries (made when it, or the run it was taken from, resumed) and those this call applied, whose
    ``epoch`` is ``resumed_from_epoch``. Empty for a run that never changed one."""
    peak_memory_mb: float | None = None
    """On CUDA, the most memory tensors held on this process's GPU during any epoch of this call
    (``torch.cuda.max_memory_allocated``, MiB); ``None`` on CPU."""
    peak_rss_mb: float | None = None
    """The whole process's peak resident memory during this call, MiB (Linux: the peak is restarted
    from the current size when the fit begins, through ``/proc/self/clear_refs``, and read from
    ``VmHWM`` at its end). It counts everything the process holds (Python, torch, the data, other
    threads), so it bounds the training's host memory from above; ``None`` where the peak cannot be
    restarted. A GPU's memory is not in it."""

    @property
    def final_metrics(self) -> dict[str, float]:
        return dict(self.history[-1]) if self.history else dict(self.resumed_metrics)
