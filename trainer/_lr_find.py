"""The learning-rate range test: train with an exponentially growing learning rate and watch the loss.

Leslie Smith's test as fastai popularised it: a few hundred optimizer steps from ``start_lr`` to
``end_lr``, the loss smoothed (an exponential moving average with bias correction), stopped when
it diverges (``diverge`` times the best smoothed loss, or not finite). The suggestion is the rate
where the smoothed loss falls fastest; a range for a search runs from a tenth of it to the rate of
the lowest loss.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from torch import nn

from trainer._config import TrainConfig
from trainer._data import TrainData
from trainer._infra import Infra
from trainer._loop import _setup
from trainer._runtime import release_model
from trainer._step import clip_gradients
from trainer._tasks import Task


@dataclass(frozen=True)
class LRRange:
    """What the range test saw, and what it suggests."""

    lrs: list[float]
    losses: list[float]
    """Smoothed training loss after each step."""
    raw_losses: list[float]
    suggested: float
    """Where the smoothed loss fell fastest (per unit of log learning rate)."""
    low: float
    high: float
    """A learning-rate range to search: a tenth of ``suggested`` up to the rate of the lowest loss."""
    stopped: str
    """Why the test ended: ``diverged at lr ...`` or ``end of range``."""


def lr_range_test(model: nn.Module, train: TrainData, task: Task, config: TrainConfig, *, infra: Infra | None = None,
                  start_lr: float = 1e-7, end_lr: float = 10.0, steps: int = 200, smoothing: float = 0.98,
                  diverge: float = 4.0) -> LRRange:  # fmt: skip
    """Run the test on ``model`` (its weights are restored afterwards) with ``config``'s optimizer,
    batch size, precision and clipping; ``config.lr`` and its schedule are replaced by the sweep.
    ``infra`` (``None``: ``Infra()``) picks the device, workers and speed switches; no checkpoints."""
    if not 0 < start_lr < end_lr:
        raise ValueError(f"need 0 < start_lr < end_lr, got {start_lr} and {end_lr}")
    if steps < 10:
        raise ValueError(f"steps must be >= 10, got {steps}")
    saved = copy.deepcopy(model.state_dict())
    infra = (Infra() if infra is None else infra).replace(checkpoint_dir=None)
    run = _setup(model, train, train, task, config.replace(grad_accum_steps=1, epochs=1), infra)
    growth = (end_lr / start_lr) ** (1 / (steps - 1))
    lrs: list[float] = []
    raw: list[float] = []
    smooth: list[float] = []
    average, best, stopped = 0.0, math.inf, "end of range"
    try:
        run.model.train()
        epoch = 0
        while len(lrs) < steps and stopped == "end of range":
            epoch += 1
            run.train.set_epoch(epoch)
            for x, y in run.train:
                lr = start_lr * growth ** len(lrs)
                for group in run.optimizer.param_groups:
                    group["lr"] = lr
                loss = run.task.loss(run.model(x), y)
                run.accelerator.backward(loss)
                clip_gradients(run)
                run.optimizer.step()
                run.optimizer.zero_grad(set_to_none=True)
                value = float(loss.detach())
                average = smoothing * average + (1 - smoothing) * value
                smoothed = average / (1 - smoothing ** (len(lrs) + 1))
                if not math.isfinite(smoothed) or (len(lrs) > 10 and smoothed > diverge * best):
                    stopped = f"diverged at lr {lr:.3g}"
                    break
                lrs.append(lr)
                raw.append(value)
                smooth.append(smoothed)
                best = min(best, smoothed)
                if len(lrs) == steps:
                    break
    finally:
        release_model(run.accelerator, run.model)
        model.load_state_dict(saved)
    suggested, low, high = _suggest(lrs, smooth)
    return LRRange(lrs, smooth, raw, suggested, low, high, stopped)


def _suggest(lrs: list[float], losses: list[float]) -> tuple[float, float, float]:
    if len(lrs) < 3:
        raise ValueError("the loss diverged within the first steps; start the range lower")
    lowest = min(range(len(losses)), key=losses.__getitem__)
    skip = max(1, len(lrs) // 10)  # the first steps are mostly the average warming up
    window = range(skip, max(skip + 1, lowest))
    slopes = {i: (losses[i + 1] - losses[i - 1]) / (math.log(lrs[i + 1]) - math.log(lrs[i - 1]))
              for i in window if 0 < i < len(lrs) - 1}  # fmt: skip
    steepest = min(slopes, key=slopes.__getitem__) if slopes else lowest
    suggested = lrs[steepest] if slopes and slopes[steepest] < 0 else lrs[lowest] / 10
    return suggested, suggested / 10, max(lrs[lowest], suggested)
