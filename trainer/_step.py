"""One micro-batch forward and backward, and one optimizer step: clipping, fp16 skips, the schedule."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor, nn

from trainer._data import MicroBatch
from trainer._monitor import EpochMonitor
from trainer._run import Run
from trainer._sharding import local, set_gradient_sync


def counted_micro_step(run: Run, x: Any, y: Any, micro: MicroBatch) -> Tensor:
    """The run's first micro-batch, its model FLOPs counted as it trains.

    A compiled model runs this one eagerly (the module it compiles, without DDP, so one process
    only): dynamo would fall back to eager under the counter's dispatch mode and keep doing so for
    every later step. A compiled multi-process run counts nothing (no ``model_tflops`` or ``mfu``).
    """
    model = run.model
    if run.infra.compile:
        if run.accelerator.num_processes > 1:
            run.flops.skip()
            return micro_step(run, x, y, micro, model)
        model = run.accelerator.unwrap_model(model, keep_torch_compile=False)
    with run.flops.counting(micro.rows):
        return micro_step(run, x, y, micro, model)


def micro_step(run: Run, x: Any, y: Any, micro: MicroBatch, model: nn.Module | None = None) -> Tensor:
    """Forward and backward of one micro-batch, its gradient added to the step's with its weight.

    Accumulation is done here, not by ``accelerator.accumulate``: a step may end after fewer
    micro-batches than ``grad_accum_steps`` (the epoch's remainder), which Accelerate cannot know.
    Gradients are synced between processes only on the micro-batch that ends a step.
    """
    accelerator, model = run.accelerator, run.model if model is None else model
    if run.sharded is not None:
        set_gradient_sync(run.sharded, micro.ends_step)
        sync = accelerator.autocast()  # a sharded model's forward is not patched by prepare
    else:
        sync = contextlib.nullcontext() if micro.ends_step else accelerator.no_sync(model)
    with sync:
        loss = run.task.loss(model(x), y)
        accelerator.backward(loss * micro.weight if micro.weight != 1 else loss)
    return loss.detach()


def optimizer_step(run: Run, monitor: EpochMonitor) -> Tensor:
    grad_norm = clip_gradients(run)
    run.lr = run.optimizer.param_groups[0]["lr"]
    scaler = run.accelerator.scaler
    if scaler is not None and run.loss_scale is None:
        run.loss_scale = scaler.get_scale()
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    if _step_was_skipped(run):  # fp16 overflow: the weights did not move, so neither does the schedule
        monitor.skipped()
    else:
        run.scheduler.step()
        run.global_step += 1
    run.on_step()
    return grad_norm


def _step_was_skipped(run: Run) -> bool:
    """Whether the fp16 gradient scaler skipped the step just taken.

    Accelerate's ``optimizer_step_was_skipped`` never says so for a fused optimizer (AdamW here):
    the scaler hands it the overflow flag and the kernel skips the update itself. The scaler halves
    its scale on every overflow and only ever grows it otherwise, so a lower scale is a skipped step.
    """
    scaler = run.accelerator.scaler
    if scaler is None:
        return False
    before, run.loss_scale = run.loss_scale, scaler.get_scale()
    return run.accelerator.optimizer_step_was_skipped or (before is not None and run.loss_scale < before)


def clip_gradients(run: Run) -> Tensor:
    """The global gradient norm, clipped to ``max_grad_norm`` when that is set."""
    if run.config.max_grad_norm is not None:
        return local(run.accelerator.clip_grad_norm_(run.params, run.config.max_grad_norm))
    # Only measure: clipping to inf would still rescale every gradient by 1.
    run.accelerator.unscale_gradients()
    return local(torch.nn.utils.get_total_norm([p.grad for p in run.params if p.grad is not None]))
