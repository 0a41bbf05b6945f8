"""What is trained: the hyperparameters, one frozen dataclass that validates itself.

Where and how a fit runs (device, workers, checkpoints) is :class:`~trainer.Infra`, apart, so that a
resume can insist on the same config and let everything else change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from trainer._errors import ConfigError

MixedPrecision = Literal["no", "bf16", "fp16"]
Sharding = Literal["ddp", "fsdp"]
MUTABLE_FIELDS = frozenset({"lr", "weight_decay", "dropout"})
"""What ``Infra.mutable`` may name: the two ``TrainConfig`` fields a resume can apply to a loaded
optimizer and schedule, and ``dropout``, the rates of the model's dropout modules (the caller's
model carries the new rates; the weights it is given hold none)."""


@dataclass(frozen=True)
class TrainConfig:
    """What is trained: every field shapes the result, so a resume refuses any change to one
    (but to those that ``Infra.mutable`` names).

    Infrastructure-independent: the same config runs on CPU or GPUs (see :class:`~trainer.Infra`).
    """

    epochs: int
    """Number of passes over the training data (``--epochs``)."""
    batch_size: int = 64
    """Samples per optimizer micro-step on each process."""
    lr: float = 1e-3
    """Peak learning rate of AdamW, reached at the end of warmup."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    warmup_fraction: float = 0.0
    """Fraction of all optimizer steps spent in linear warmup; cosine decay to 0 follows."""
    grad_accum_steps: int = 1
    """Micro-batches accumulated per optimizer step (the epoch's last step may take fewer)."""
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this on every sync step; ``None`` disables clipping."""
    mixed_precision: MixedPrecision = "no"
    """Autocast dtype: ``no``, ``bf16`` or ``fp16`` (fp16 needs CUDA)."""
    seed: int = 0
    """Seeds model-independent randomness: shuffling, dropout."""
    sharding: Sharding = "ddp"
    """How a multi-process fit splits the work: ``ddp`` replicates the model on every process;
    ``fsdp`` shards parameters, gradients and optimizer state over them (FSDP2), for models that do
    not fit one device. A single-process fit ignores it. ``fsdp`` takes ``no`` or ``bf16`` precision."""

    def __post_init__(self) -> None:
        _check(self.epochs >= 1, f"epochs must be >= 1 (--epochs), got {self.epochs}")
        _check(self.batch_size >= 1, f"batch_size must be >= 1 (--batch-size), got {self.batch_size}")
        _check(self.lr > 0, f"lr must be > 0 (--lr), got {self.lr}")
        _check(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        _check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            f"betas must be two values in [0, 1), got {self.betas}",
        )
        _check(
            0 <= self.warmup_fraction < 1,
            f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}",
        )
        _check(self.grad_accum_steps >= 1, f"grad_accum_steps must be >= 1, got {self.grad_accum_steps}")
        _check(
            self.max_grad_norm is None or self.max_grad_norm > 0,
            f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}",
        )
        _check(
            self.mixed_precision in ("no", "bf16", "fp16"),
            f"mixed_precision must be one of no, bf16, fp16 (--mixed-precision), got {self.mixed_precision!r}",
        )
        _check(self.sharding in ("ddp", "fsdp"), f"sharding must be ddp or fsdp, got {self.sharding!r}")
        _check(
            not (self.sharding == "fsdp" and self.mixed_precision == "fp16"),
            "sharding='fsdp' takes mixed_precision 'no' or 'bf16', not 'fp16' (no sharded gradient scaler here)",
        )
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))

    def replace(self, **changes: Any) -> TrainConfig:
        """Return a copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so the dict survives ``torch.load(weights_only=True)`` and JSON."""
        out = dataclasses.asdict(self)
        out["betas"] = list(self.betas)
        return out


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
