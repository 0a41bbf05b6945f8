"""What one call to ``fit`` trains with, and how far it has got."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from accelerate import Accelerator
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from trainer._checkpoint import Checkpointer
from trainer._config import TrainConfig
from trainer._data import Batches, MicroBatch
from trainer._infra import Infra
from trainer._mutation import Mutation
from trainer._tasks import Task
from trainer._throughput import FlopCount


@dataclass
class Run:
    """What one call to ``fit`` trains with, and how far it has got."""

    config: TrainConfig
    infra: Infra
    task: Task
    accelerator: Accelerator
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
    train: Batches
    val_steps: int
    """Validation batches of the process with the most (sharded models forward in lockstep)."""
    layout: list[MicroBatch]
    """This process's micro-batches of a training epoch: rows, loss weight, whether a step ends."""
    val: Batches
    checkpoints: Checkpointer | None
    params: list[Tensor]
    epoch: int = 0
    global_step: int = 0
    lr: float = math.nan
    best_epoch: int = 0
    best_val_loss: float = math.inf
    resumed_from: int = 0
    resumed_metrics: dict[str, float] = field(default_factory=dict)
    """The metrics of the epoch the resumed checkpoint was written after (see ``FitResult``)."""
    resumed_curve: dict[int, dict[str, float]] = field(default_factory=dict)
    """The metrics of every epoch up to the resumed checkpoint's, as far as it kept them (see ``FitResult``)."""
    history: list[dict[str, float]] = field(default_factory=list)
    mutations: list[Mutation] = field(default_factory=list)
    """Hyperparameter changes of this run's lineage, oldest first (see ``FitResult.mutations``)."""
    train_samples: int = 0
    train_seconds: float = 0.0
    callback_seconds: float = 0.0
    saved_at: float = 0.0
    """``time.perf_counter()`` when the last checkpoint was written (or the fit began)."""
    sharded: nn.Module | None = None
    """The FSDP-sharded module (``sharding="fsdp"`` over several processes), else ``None``; found
    once here, since unwrapping the prepared model costs ~90 us, twice a micro-batch."""
    flops: FlopCount = field(default_factory=FlopCount)
    """Model FLOPs per training row, counted on the run's first micro-batch."""
    loss_scale: float | None = None
    """The fp16 gradient scaler's scale before the next step (``None``: not read yet)."""
    on_step: Callable[[], object] = lambda: None
    """Called after every optimizer step (a profiler's ``step``); a no-op unless given to ``fit``."""
