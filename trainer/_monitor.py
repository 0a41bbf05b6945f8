"""Per-epoch training statistics kept on the device, read back only every ``check_every`` steps."""

from __future__ import annotations

import math

import torch
from accelerate import Accelerator
from torch import Tensor

from trainer._errors import DivergenceError

CHECK_EVERY = 50
"""Micro-batches between divergence checks; each check costs one device sync and one gather."""


class EpochMonitor:
    """Micro-batch losses and gradient norms of one epoch, without a device sync every step.

    Every ``check_every`` micro-batches and at the end of the epoch, the values recorded since the
    last check are folded into running sums and tested for NaN/inf on all processes at once (one
    gather), so every process raises the same :class:`DivergenceError`, naming the first bad
    micro-batch of any process.
    """

    def __init__(self, accelerator: Accelerator, epoch: int, check_every: int = CHECK_EVERY) -> None:
        self.accelerator, self.epoch, self.check_every = accelerator, epoch, check_every
        self.losses: list[Tensor] = []
        self.norms: list[Tensor] = []
        self.checked = 0
        self.loss_sum = self.loss_count = 0.0
        self.norm_sum = self.norm_count = 0.0

    def record(self, loss: Tensor, grad_norm: Tensor | None) -> None:
        self.losses.append(loss)
        if grad_norm is not None:
            self.norms.append(grad_norm)
        if len(self.losses) >= self.check_every:
            self.check()

    def check(self) -> None:
        """Fold in the pending values; raise :class:`DivergenceError` if any process saw a bad loss."""
        if not self.losses:
            return
        window = torch.stack(self.losses).double()
        bad = ~torch.isfinite(window)
        first = torch.argmax(bad.to(torch.uint8))  # argmax returns the first maximal index
        norms = torch.stack(self.norms).double() if self.norms else window.new_zeros(0)
        finite_norms = norms[torch.isfinite(norms)]
        row = [torch.where(bad.any(), first, -1).double(), window[first], window.sum()]
        row += [finite_norms.sum(), window.new_tensor(len(finite_norms))]
        rows = self.accelerator.gather(torch.stack(row).double()).view(-1, 5).tolist()
        hits = [(int(step) + self.checked, loss) for step, loss, *_ in rows if step >= 0]
        if hits:
            raise DivergenceError(self.epoch, *min(hits))
        self.loss_sum += sum(r[2] for r in rows)
        self.loss_count += len(window) * len(rows)
        self.norm_sum, self.norm_count = self.norm_sum + rows[0][3], self.norm_count + rows[0][4]
        self.checked += len(window)
        self.losses, self.norms = [], []

    def summary(self) -> dict[str, float]:
        """``train_loss``: mean over every process's micro-batches. ``grad_norm``: mean over this
        epoch's optimizer steps with a finite norm (the norm is the same on every process)."""
        self.check()
        return {
            "train_loss": self.loss_sum / self.loss_count if self.loss_count else math.nan,
            "grad_norm": self.norm_sum / self.norm_count if self.norm_count else math.nan,
        }
