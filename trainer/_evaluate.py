"""Validation: per-process sums over disjoint shards, summed over processes, then metrics."""

from __future__ import annotations

from typing import Literal, overload

import torch
from accelerate import Accelerator
from torch import nn

from trainer._config import TrainConfig
from trainer._data import Batches, IndexPlan, TrainData, dataset_size, make_batches
from trainer._infra import Infra
from trainer._runtime import make_accelerator
from trainer._sharding import is_sharded
from trainer._tasks import State, Task


def validate(accelerator: Accelerator, model: nn.Module, batches: Batches, task: Task, *, lockstep: int = 0) -> State:
    """Sums of ``task`` over every process's shard, reduced so that all processes hold the total.

    A sharded (FSDP) model's forward is a collective, so every process must run as many: one with
    fewer batches than ``lockstep`` repeats its first batch, uncounted, until it has run that many.
    """
    # The bare module, not the DDP wrapper: shards may differ by a batch, and DDP's forward would
    # wait for a peer that has already finished.
    module = accelerator.unwrap_model(model, keep_torch_compile=False)  # compiled runs validate eagerly
    was_training = module.training
    module.eval()
    state = task.new_state(accelerator.device)
    try:
        with torch.no_grad(), accelerator.autocast():
            done, first = 0, None
            for x, y in batches:
                task.update(state, module(x), y)
                done, first = done + 1, x if first is None else first
            if is_sharded(module) and first is not None:
                for _ in range(lockstep - done):
                    module(first)
    finally:
        module.train(was_training)
    return accelerator.reduce(state, reduction="sum")


@overload
def evaluate(
    model: nn.Module,
    data: TrainData,
    task: Task,
    config: TrainConfig,
    *,
    infra: Infra | None = None,
    return_state: Literal[False] = False,
) -> dict[str, float]: ...


@overload
def evaluate(
    model: nn.Module,
    data: TrainData,
    task: Task,
    config: TrainConfig,
    *,
    infra: Infra | None = None,
    return_state: Literal[True],
) -> tuple[dict[str, float], State]: ...


def evaluate(
    model: nn.Module,
    data: TrainData,
    task: Task,
    config: TrainConfig,
    *,
    infra: Infra | None = None,
    return_state: bool = False,
) -> dict[str, float] | tuple[dict[str, float], State]:
    """Metrics of ``model`` on ``data`` (e.g. the test split at retrain), exact across processes.

    Uses ``config``'s precision and ``batch_size``, and ``infra``'s device choice, ``num_workers`` and
    speed switches (``None``: ``Infra()``); moves ``model`` to the device. Metric names are the task's
    (``val_loss``, ``val_accuracy`` ...) whatever split ``data`` is.

    Args:
        return_state: also return the reduced sums, on CPU. For :class:`~trainer.Classification`
            they hold the confusion matrix: ``Classification.confusion_matrix(state)``.

    Returns:
        The metrics on every process, or ``(metrics, state)`` with ``return_state=True``.
    """
    infra = Infra() if infra is None else infra
    accelerator = make_accelerator(config, infra)
    model.to(accelerator.device)
    plan = IndexPlan(
        dataset_size(data),
        config.batch_size,
        rank=accelerator.process_index,
        world=accelerator.num_processes,
    )
    batches = make_batches(data, plan, accelerator.device, infra.num_workers)
    state = validate(accelerator, model, batches, task)
    metrics = task.compute(state)
    if return_state:
        return metrics, {name: value.cpu() for name, value in state.items()}
    return metrics
