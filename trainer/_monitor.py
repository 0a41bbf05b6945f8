"""Per-epoch training statistics kept on the device, read back only every ``check_every`` steps."""

from __future__ import annotations

import math

import torch
from accelerate import Accelerator
from torch import Tensor

from trainer._errors import DivergenceError

CHECK_EVERY = 8
"""Micro-batches between divergence checks; each check costs one device sync and one gather, so a
NaN loss stops training within 8 micro-batches instead of running on for the rest of the epoch."""

_ROW = 9  # values each process contributes per check; see EpochMonitor.check
SPIKE_FACTOR = 2.0
"""A micro-batch loss above this many times the mean of the previous check window is a spike."""


class EpochMonitor:
    """Micro-batch losses and gradient norms of one epoch, without a device sync every step.

    Every ``check_every`` micro-batches and at the end of the epoch, the values recorded since the
    last check are folded into running sums and tested for NaN/inf on all processes at once (one
    gather), so every process raises the same :class:`DivergenceError`, naming the first bad
    micro-batch of any process.

    Gradient norms: the mean and maximum over the optimizer steps whose norm was finite, and how
    many were not (an fp16 overflow, or a real blow-up when no scaler skips the step). Loss spikes:
    micro-batches whose loss exceeded ``SPIKE_FACTOR`` times the previous window's mean (a warning
    sign before divergence; the first window of an epoch has no reference).
    """

    def __init__(self, accelerator: Accelerator, epoch: int, check_every: int = CHECK_EVERY) -> None:
        self.accelerator, self.epoch, self.check_every = accelerator, epoch, check_every
        self.losses: list[Tensor] = []
        self.rows: list[int] = []
        self.norms: list[Tensor] = []
        self.checked = 0
        self.loss_sum = self.loss_rows = 0.0
        self.norm_sum = self.norm_count = self.nonfinite_norms = 0.0
        self.norm_max = -math.inf
        self.skipped_steps = 0
        self.spikes = 0.0
        self.reference: float | None = None

    def record(self, loss: Tensor, rows: int, grad_norm: Tensor | None) -> None:
        """A micro-batch's mean loss over its ``rows``; ``grad_norm`` when it ended a step."""
        self.losses.append(loss)
        self.rows.append(rows)
        if grad_norm is not None:
            self.norms.append(grad_norm)
        if len(self.losses) >= self.check_every:
            self.check()

    def skipped(self) -> None:
        """The step just taken was skipped (fp16 overflow): the weights and schedule did not move."""
        self.skipped_steps += 1

    def check(self) -> None:
        """Fold in the pending values; raise :class:`DivergenceError` if any process saw a bad loss."""
        if not self.losses:
            return
        window = torch.stack(self.losses).double()
        rows = window.new_tensor(self.rows)
        bad = ~torch.isfinite(window)
        first = torch.argmax(bad.to(torch.uint8))  # argmax returns the first maximal index
        norms = torch.stack(self.norms).double() if self.norms else window.new_zeros(0)
        finite = torch.isfinite(norms)
        finite_norms = norms[finite]
        top = finite_norms.max() if len(finite_norms) else window.new_tensor(-math.inf)
        row = [torch.where(bad.any(), first, -1).double(), window[first], (window * rows).sum(), rows.sum()]
        row += [finite_norms.sum(), window.new_tensor(len(finite_norms)), top, (~finite).sum().double()]
        limit = math.inf if self.reference is None else SPIKE_FACTOR * self.reference
        row += [(window > limit).sum().double()]
        gathered = self.accelerator.gather(torch.stack(row).double()).view(-1, _ROW).tolist()
        hits = [(int(step) + self.checked, loss) for step, loss, *_ in gathered if step >= 0]
        if hits:
            raise DivergenceError(self.epoch, *min(hits))
        self.loss_sum += sum(r[2] for r in gathered)
        self.loss_rows += sum(r[3] for r in gathered)
        ours = gathered[0]  # the norm is of the synced gradients: the same on every process
        self.norm_sum, self.norm_count = self.norm_sum + ours[4], self.norm_count + ours[5]
        self.norm_max = max(self.norm_max, ours[6])
        self.nonfinite_norms += ours[7]
        self.spikes += sum(r[8] for r in gathered)
        self.reference = sum(r[2] for r in gathered) / sum(r[3] for r in gathered)
        self.checked += len(window)
        self.losses, self.rows, self.norms = [], [], []

    def summary(self) -> dict[str, float]:
        """``train_loss``: mean over every training row of the epoch, all processes.
        ``grad_norm``/``grad_norm_max``: mean and maximum over the epoch's optimizer steps with a
        finite norm; ``nonfinite_grad_norms``: steps whose norm was NaN or infinite;
        ``skipped_steps``: steps an fp16 gradient scaler skipped; ``loss_spikes``: micro-batches (all
        processes) whose loss exceeded twice the previous window's mean."""
        self.check()
        return {
            "train_loss": self.loss_sum / self.loss_rows if self.loss_rows else math.nan,
            "grad_norm": self.norm_sum / self.norm_count if self.norm_count else math.nan,
            "grad_norm_max": self.norm_max if self.norm_count else math.nan,
            "nonfinite_grad_norms": self.nonfinite_norms,
            "skipped_steps": float(self.skipped_steps),
            "loss_spikes": self.spikes,
        }
