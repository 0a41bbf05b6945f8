"""``fit``: the training loop. Each part of an epoch is a small function that reads like its name."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import cast

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn

from trainer._checkpoint import Checkpointer
from trainer._config import TrainConfig
from trainer._data import IndexPlan, TrainData, dataset_size, make_batches
from trainer._errors import ConfigError
from trainer._evaluate import validate
from trainer._hooks import CheckpointListener, Hook, MetricsSink
from trainer._infra import Infra
from trainer._monitor import EpochMonitor
from trainer._optim import build_optimizer, build_scheduler
from trainer._result import FitResult
from trainer._resume import resume, snapshot
from trainer._run import Run
from trainer._runtime import make_accelerator, release_model
from trainer._sharding import shard_model, sync_buffers
from trainer._step import counted_micro_step, micro_step, optimizer_step
from trainer._tasks import LanguageModeling, Task
from trainer._throughput import peak_memory_mb, peak_rss_mb, peak_tflops, reset_peak_memory, reset_peak_rss


def fit(
    model: nn.Module,
    train: TrainData,
    val: TrainData,
    task: Task,
    config: TrainConfig,
    *,
    infra: Infra | None = None,
    hooks: Sequence[Hook] = (),
    sink: MetricsSink | None = None,
    on_step: Callable[[], object] | None = None,
) -> FitResult:
    """Train ``model`` in place and validate it after every epoch.

    An epoch trains on every training row once: the last optimizer step takes the rows left over,
    with each micro-batch's loss weighted so the step's gradient is the mean over its rows.

    Per-epoch metrics (``epoch, train_loss, val_loss, <task metrics>, lr, grad_norm, grad_norm_max,
    nonfinite_grad_norms, skipped_steps, loss_spikes, epoch_seconds, samples_per_second,
    model_tflops``, and ``tokens_per_second`` for language models, ``mfu`` where the GPU's peak is known and
    ``peak_memory_mb`` on CUDA) go to ``sink`` and to every hook on the main process; a hook
    returning ``True`` stops all processes after that epoch.
    ``lr`` is the rate of the epoch's last optimizer step, ``skipped_steps`` counts steps an fp16
    gradient scaler skipped on overflow (they move neither the weights nor the schedule),
    ``epoch_seconds`` includes validation and ``samples_per_second`` does not. The model is left on
    the training device.

    ``config`` is what is trained; ``infra`` where and how (device, data workers, checkpoints, speed
    switches; ``None``: ``Infra()``). With ``infra.checkpoint_dir`` set, the full training state is
    saved after every epoch (with ``infra.checkpoint_every``, as often as losing at most that many
    seconds needs), and with ``infra.resume`` a call continues after the newest checkpoint that loads
    (damaged ones are skipped with a ``RuntimeWarning``), ending with the weights an uninterrupted run
    would have. ``infra`` may differ from the interrupted run's; a checkpoint trained with another
    ``config`` (any field, ``epochs`` included; the model's dropout rates too) or by another number of
    processes is refused with a :class:`CheckpointError`, but for the fields ``infra.mutable`` names
    (``lr``, ``weight_decay``, ``dropout``): those are applied to the loaded optimizer and schedule and
    listed in ``FitResult.mutations``. With ``infra.init_from`` and no checkpoint of its own, the fit
    starts from another run's checkpoint (copied into ``infra.checkpoint_dir`` first) and goes on
    after that run's epoch.

    ``on_step`` is called after every optimizer step, e.g. ``trainer.profiled(...)``'s ``step``.

    Raises:
        ConfigError: ``config`` cannot run here (fp16 without CUDA), or its effective batch
            (``batch_size x grad_accum_steps x processes``) exceeds the training rows.
        DivergenceError: the training loss became NaN or infinite.
        CheckpointError: the checkpoint to resume from does not fit ``model`` or was trained with
            another ``config`` (beyond ``infra.mutable``) or number of processes, or
            ``infra.init_from`` holds no usable checkpoint.
    """
    started = time.perf_counter()
    rss_reset = reset_peak_rss()
    run = _setup(model, train, val, task, config, Infra() if infra is None else infra)
    if on_step is not None:
        run.on_step = on_step
    try:
        resume(run)
        run.saved_at = time.perf_counter()
        stopped_epoch = _train(run, hooks, sink)
    finally:
        release_model(run.accelerator, run.model)
    return _result(run, stopped_epoch, time.perf_counter() - started, peak_rss_mb() if rss_reset else None)


def _train(run: Run, hooks: Sequence[Hook], sink: MetricsSink | None) -> int | None:
    for epoch in range(run.epoch + 1, run.config.epochs + 1):
        metrics = _train_epoch(run, epoch)
        saved = _record(run, epoch, metrics)
        if _should_stop(run, hooks, sink, epoch, metrics, saved):
            return epoch
    return None


def _setup(model: nn.Module, train: TrainData, val: TrainData, task: Task, config: TrainConfig, infra: Infra) -> Run:
    accelerator = make_accelerator(config, infra)
    set_seed(config.seed, device_specific=True)  # seed + rank: each process its own dropout stream
    train_plan, val_plan = _plans(train, val, config, accelerator)
    train_batches = make_batches(train, train_plan, accelerator.device, infra.num_workers)
    val_batches = make_batches(val, val_plan, accelerator.device, infra.num_workers)
    checkpoints = None
    if infra.checkpoint_dir is not None:
        is_main = accelerator.is_main_process
        checkpoints = Checkpointer(infra.checkpoint_dir, infra.keep_last, writer=is_main)
    if infra.channels_last and accelerator.device.type == "cuda":
        model = model.to(accelerator.device, memory_format=torch.channels_last)  # type: ignore[call-overload]
    sharded = config.sharding == "fsdp" and accelerator.num_processes > 1
    sharded_module = None
    if sharded:  # before the optimizer, which then holds each process's shards
        model = sharded_module = shard_model(model, accelerator.device, accelerator.num_processes)
    optimizer = build_optimizer(model, config)
    total_steps = config.epochs * train_plan.optimizer_steps
    scheduler = build_scheduler(optimizer, total_steps, config)
    if sharded:  # Accelerate would wrap the sharded model in DDP; fit autocasts it itself
        optimizer = accelerator.prepare(optimizer)
    else:
        model, optimizer = accelerator.prepare(model, optimizer)  # last: from here on `fit` must release
    if infra.compile:  # around the DDP wrapper, as Accelerate does; checkpoints see the plain module
        model = cast(nn.Module, torch.compile(model))
    return Run(
        config=config,
        infra=infra,
        task=task,
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        train=train_batches,
        val_steps=max(len(val_plan.for_rank(rank)) for rank in range(accelerator.num_processes)),
        layout=train_plan.layout(),
        val=val_batches,
        checkpoints=checkpoints,
        params=[p for p in model.parameters() if p.requires_grad],
        sharded=sharded_module,
    )


def _plans(
    train: TrainData, val: TrainData, config: TrainConfig, accelerator: Accelerator
) -> tuple[IndexPlan, IndexPlan]:
    shard = {"rank": accelerator.process_index, "world": accelerator.num_processes}
    rows, step_rows = dataset_size(train), config.batch_size * config.grad_accum_steps * accelerator.num_processes
    if step_rows > rows:
        raise ConfigError(
            f"the effective batch ({config.batch_size} x {config.grad_accum_steps} accumulation steps x "
            f"{accelerator.num_processes} processes = {step_rows}) exceeds the {rows} training rows; "
            "lower batch_size or grad_accum_steps"
        )
    if config.sharding == "fsdp" and accelerator.num_processes > 1 and dataset_size(val) < accelerator.num_processes:
        raise ConfigError(
            f"sharding='fsdp' needs at least one validation row per process ({accelerator.num_processes})"
        )
    train_plan = IndexPlan(
        rows,
        config.batch_size,
        shuffle=True,
        seed=config.seed,
        accum=config.grad_accum_steps,
        **shard,
    )
    return train_plan, IndexPlan(dataset_size(val), config.batch_size, **shard)


def _train_epoch(run: Run, epoch: int) -> dict[str, float]:
    started = time.perf_counter()
    run.model.train()
    run.train.set_epoch(epoch)
    monitor = EpochMonitor(run.accelerator, epoch)
    reset_peak_memory(run.accelerator.device)
    count_tokens, tokens = isinstance(run.task, LanguageModeling), 0
    for (x, y), micro in zip(run.train, run.layout, strict=True):
        step = counted_micro_step if run.flops.pending else micro_step
        loss = step(run, x, y, micro)
        if count_tokens:
            tokens += y.numel()
        grad_norm = optimizer_step(run, monitor) if micro.ends_step else None
        monitor.record(loss, micro.rows, grad_norm)
    stats = monitor.summary()  # syncs the device, so the clock below is honest
    train_seconds = time.perf_counter() - started
    world = run.accelerator.num_processes
    samples = sum(m.rows for m in run.layout) * world
    run.train_samples += samples
    run.train_seconds += train_seconds
    metrics = {"epoch": epoch, "train_loss": stats.pop("train_loss")}
    if run.sharded is not None:
        sync_buffers(run.model)  # validation and the checkpoint see rank 0's BatchNorm statistics
    metrics |= run.task.compute(validate(run.accelerator, run.model, run.val, run.task, lockstep=run.val_steps))
    metrics |= {"lr": run.lr} | stats
    metrics |= {"epoch_seconds": time.perf_counter() - started, "samples_per_second": samples / train_seconds}
    if count_tokens:
        metrics["tokens_per_second"] = tokens * world / train_seconds
    return metrics | _speed(run, samples / train_seconds)


def _speed(run: Run, samples_per_second: float) -> dict[str, float]:
    """``model_tflops`` (all processes), ``mfu`` where the device's peak is known, ``peak_memory_mb``
    on CUDA (this process's device)."""
    out: dict[str, float] = {}
    device = run.accelerator.device
    if run.flops.per_row:
        out["model_tflops"] = run.flops.per_row * samples_per_second / 1e12
        peak = peak_tflops(device, run.config.mixed_precision, run.infra.tf32)
        if peak:
            out["mfu"] = out["model_tflops"] / (peak * run.accelerator.num_processes)
    memory = peak_memory_mb(device)
    if memory is not None:
        out["peak_memory_mb"] = memory
    return out


def _record(run: Run, epoch: int, metrics: dict[str, float]) -> bool:
    """Keep the epoch's metrics and best, and save a checkpoint if one is due; whether one was."""
    run.history.append(metrics)
    run.epoch = epoch
    is_best = _improves(metrics["val_loss"], run.best_val_loss) or run.best_epoch == 0
    if is_best:
        run.best_epoch, run.best_val_loss = epoch, metrics["val_loss"]
    if run.checkpoints is not None and _checkpoint_due(run, epoch, metrics["epoch_seconds"]):
        run.checkpoints.save(snapshot(run), epoch, is_best=is_best and not run.infra.checkpoint_every)
        run.saved_at = time.perf_counter()
        return True
    return False


def _checkpoint_due(run: Run, epoch: int, epoch_seconds: float) -> bool:
    """After every epoch, or (``checkpoint_every``) when waiting for the next one would lose more;
    the main process decides for all, since writing one is a collective (gathers, FSDP state)."""
    every, last = run.infra.checkpoint_every, epoch == run.config.epochs and run.infra.checkpoint_last
    due = not every or last or epoch in run.infra.checkpoint_at
    due = due or time.perf_counter() - run.saved_at + epoch_seconds >= every
    if run.accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        due = bool(broadcast_object_list([due])[0])
    return due


def _improves(value: float, best: float) -> bool:
    return not math.isnan(value) and (math.isnan(best) or value < best)


def _should_stop(
    run: Run,
    hooks: Sequence[Hook],
    sink: MetricsSink | None,
    epoch: int,
    metrics: Mapping[str, float],
    saved: bool,
) -> bool:
    accelerator = run.accelerator
    if accelerator.is_main_process:
        started = time.perf_counter()
        if saved:  # before the hooks see the epoch: what they keep back may be written with it
            for hook in hooks:
                if isinstance(hook, CheckpointListener):
                    hook.checkpoint_saved(epoch)
        if sink is not None:
            sink.log(dict(metrics), step=epoch)
        votes = [hook(epoch, dict(metrics)) for hook in hooks]  # every hook sees every epoch
        run.callback_seconds += time.perf_counter() - started  # the caller's time, not training's
        if any(votes):
            accelerator.set_trigger()
    return accelerator.check_trigger()


def _result(run: Run, stopped_epoch: int | None, seconds: float, rss_mb: float | None) -> FitResult:
    config, accelerator = run.config, run.accelerator
    memory = [h["peak_memory_mb"] for h in run.history if "peak_memory_mb" in h]
    return FitResult(
        epochs_run=run.epoch,
        stopped_early=stopped_epoch is not None and stopped_epoch < config.epochs,
        stopped_epoch=stopped_epoch,
        best_epoch=run.best_epoch,
        best_val_loss=run.best_val_loss,
        history=run.history,
        effective_batch_size=config.batch_size * accelerator.num_processes * config.grad_accum_steps,
        samples_per_second=run.train_samples / run.train_seconds if run.train_seconds > 0 else 0.0,
        fit_seconds=seconds,
        callback_seconds=run.callback_seconds,
        resumed_from_epoch=run.resumed_from,
        resumed_metrics=run.resumed_metrics,
        resumed_curve=run.resumed_curve,
        best_checkpoint=None if run.checkpoints is None or run.infra.checkpoint_every else run.checkpoints.best_path,
        mutations=tuple(run.mutations),
        peak_memory_mb=max(memory) if memory else None,
        peak_rss_mb=rss_mb,
    )
