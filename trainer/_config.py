"""Training configuration: one frozen dataclass that validates itself."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainer._errors import ConfigError

MixedPrecision = Literal["no", "bf16", "fp16"]
Sharding = Literal["ddp", "fsdp"]


@dataclass(frozen=True)
class TrainConfig:
    """How to fit a model. Infrastructure-independent: the same config runs on CPU or GPUs."""

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
    checkpoint_dir: Path | None = None
    """Where to write one checkpoint per epoch; ``None`` writes none."""
    keep_last: int = 2
    """How many most recent epoch checkpoints to keep (the best by validation loss is always kept)."""
    checkpoint_every: float = 0.0
    """Seconds of training a killed run may lose. 0 writes a checkpoint after every epoch. Above 0,
    one is written after an epoch when the next epoch would end more than this after the last
    checkpoint (the start of the fit, at first), so every epoch once epochs take this long, and
    always after the last epoch: a run of many short epochs saves every ``checkpoint_every``
    seconds, not every epoch. ``best.pt`` is then not kept (its epoch may never have been saved)."""
    resume: bool = True
    """Resume from the newest good checkpoint in ``checkpoint_dir`` when there is one."""
    cpu: bool = False
    """Train on CPU even when CUDA is available."""
    num_workers: int = 2
    """DataLoader workers, used only for datasets that are not in-memory tensors."""
    sharding: Sharding = "ddp"
    """How a multi-process fit splits the work: ``ddp`` replicates the model on every process;
    ``fsdp`` shards parameters, gradients and optimizer state over them (FSDP2), for models that do
    not fit one device. A single-process fit ignores it. ``fsdp`` takes ``no`` or ``bf16`` precision."""
    compile: bool = False
    """Compile the model's forward (and so its backward) with ``torch.compile`` for this fit. The
    first step pays the compilation (seconds to minutes); a later fit in the same process of a model
    with the same code and shapes reuses it. Meant for long trials on GPUs (not measured here); on
    this 2-core CPU it lost: 0.88x the plain loop's samples/s against 1.07x uncompiled
    (``bench_trainer.py --compile``, a 128-256x4-10 MLP). The caller's module is left uncompiled."""
    channels_last: bool = False
    """On CUDA, keep the model's 4-D weights (and so its convolutions' activations) channels-last,
    the layout tensor-core convolutions run fastest in. No effect on CPU."""
    cudnn_benchmark: bool = False
    """On CUDA, let cuDNN time its convolution algorithms for each new input shape and keep the
    fastest (worth it when shapes repeat, as fixed-size image batches do). No effect on CPU."""
    tf32: bool = True
    """On CUDA GPUs from Ampere on, run float32 matmuls and convolutions on TF32 tensor cores (about
    8x the float32 rate, 10-bit mantissa products with float32 accumulation). No effect on CPU."""

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
        _check(self.keep_last >= 1, f"keep_last must be >= 1, got {self.keep_last}")
        _check(
            0 <= self.checkpoint_every < math.inf,
            f"checkpoint_every must be a number of seconds >= 0, got {self.checkpoint_every}",
        )
        _check(self.num_workers >= 0, f"num_workers must be >= 0, got {self.num_workers}")
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, Path):
            object.__setattr__(self, "checkpoint_dir", Path(self.checkpoint_dir))
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))

    def replace(self, **changes: Any) -> TrainConfig:
        """Return a copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so the dict survives ``torch.load(weights_only=True)`` and JSON."""
        out = dataclasses.asdict(self)
        out["betas"] = list(self.betas)
        out["checkpoint_dir"] = None if self.checkpoint_dir is None else str(self.checkpoint_dir)
        return out


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
