"""Checkpoint state of a run: what is saved after each epoch and how a run resumes from it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelerate.utils import gather_object

from trainer._checkpoint import capture_rng, restore_rng
from trainer._config import TrainConfig
from trainer._errors import CheckpointError
from trainer._infra import Infra
from trainer._run import Run
from trainer._sharding import full_state, is_sharded, load_full_state


def snapshot(run: Run) -> dict[str, Any]:
    scaler = run.accelerator.scaler
    module = run.accelerator.unwrap_model(run.model, keep_torch_compile=False)
    if is_sharded(module):  # gathered on rank 0, the one that writes
        model_state, optimizer_state = full_state(module, run.optimizer)
    else:
        model_state, optimizer_state = module.state_dict(), run.optimizer.state_dict()
    return {
        "model": model_state,
        "optimizer": optimizer_state,
        "scheduler": run.scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(),
        "rng": gather_object([capture_rng()]) if run.accelerator.num_processes > 1 else [capture_rng()],
        "world_size": run.accelerator.num_processes,
        "epoch": run.epoch,
        "global_step": run.global_step,
        "lr": run.lr,
        "val_loss": run.history[-1]["val_loss"],
        "best_epoch": run.best_epoch,
        "best_val_loss": run.best_val_loss,
        "config": run.config.to_dict(),  # what a resume must match
        "infra": run.infra.to_dict(),  # for information: a resume may run otherwise
    }


def resume(run: Run) -> None:
    if run.checkpoints is None:
        return
    state = run.checkpoints.load_latest() if run.infra.resume else None
    run.accelerator.wait_for_everyone()  # every process has read before the main process prunes
    run.checkpoints.discard_after(0 if state is None else state["epoch"])
    if state is not None:
        _restore(run, state)


def _restore(run: Run, state: dict[str, Any]) -> None:
    """Restore ``state`` into ``run``; a checkpoint whose values are not what we wrote (a wrong type,
    a missing entry inside one) raises :class:`CheckpointError`, which a caller can answer by
    starting over (``Infra(resume=False)``), never a bare KeyError or TypeError."""
    try:
        _restore_state(run, state)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as exc:
        where = run.infra.checkpoint_dir
        raise CheckpointError(f"cannot resume from {where}: the checkpoint is damaged ({exc!r})") from exc


def _restore_state(run: Run, state: dict[str, Any]) -> None:
    _refuse_config_change(state, run.config, run.infra)
    world, saved_world = run.accelerator.num_processes, state.get("world_size", 1)
    if saved_world != world:
        raise CheckpointError(
            f"cannot resume from epoch {state['epoch']} in {run.infra.checkpoint_dir}: it was trained by "
            f"{saved_world} processes, not {world} (each process's data shard and random streams are in it)"
        )
    module = run.accelerator.unwrap_model(run.model, keep_torch_compile=False)
    try:
        if is_sharded(module):
            load_full_state(module, run.optimizer, state["model"], state["optimizer"])
        else:
            module.load_state_dict(state["model"])
            run.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        where = run.infra.checkpoint_dir
        raise CheckpointError(f"cannot resume from epoch {state['epoch']} in {where}: {exc}") from exc
    run.scheduler.load_state_dict(state["scheduler"])
    if run.accelerator.scaler is not None and state.get("scaler") is not None:
        run.accelerator.scaler.load_state_dict(state["scaler"])
        run.loss_scale = None
    rng = state["rng"]
    restore_rng(rng[run.accelerator.process_index] if isinstance(rng, list) else rng)  # a list: one per rank
    run.epoch = run.resumed_from = state["epoch"]
    run.global_step, run.lr = state["global_step"], state["lr"]
    run.best_epoch, run.best_val_loss = state["best_epoch"], state["best_val_loss"]


def _refuse_config_change(state: Mapping[str, Any], config: TrainConfig, infra: Infra) -> None:
    """Every ``TrainConfig`` field must match the checkpoint's (``epochs`` too: the schedule's length
    depends on it). Older checkpoints also hold the infrastructure in ``config``: those keys are not
    ``TrainConfig``'s, so they are not compared; nor is a field the checkpoint predates."""
    saved, current = state["config"], config.to_dict()
    changed = [k for k in current if k in saved and saved[k] != current[k]]
    if changed:
        what = ", ".join(f"{k}={saved[k]!r} (now {current[k]!r})" for k in changed)
        raise CheckpointError(
            f"cannot resume from epoch {state['epoch']} in {infra.checkpoint_dir}: it was trained with "
            f"{what}; resume with the same hyperparameters, or start over with Infra(resume=False)"
        )
