"""Checkpoint state of a run: what is saved after each epoch and how a run resumes from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelerate.utils import gather_object

from trainer._checkpoint import RESUME_KEYS, Checkpointer, capture_rng, load_checkpoint, restore_rng
from trainer._errors import CheckpointError
from trainer._mutation import Mutation, apply_to_optimizer, changed_hyperparameters, dropout_rates
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
        "metrics": dict(run.history[-1]),  # what a resume after the last epoch reports as final
        "curve": curve(run),  # every epoch's, for a resume to report those its attempt could not
        "best_epoch": run.best_epoch,
        "best_val_loss": run.best_val_loss,
        "config": run.config.to_dict(),  # what a resume must match (but for Infra.mutable's fields)
        "dropout": dropout_rates(module),  # the model's own hyperparameters, compared as config's are
        "mutations": [m.to_dict() for m in run.mutations],  # the lineage, for a schedule to be replayed
        "infra": run.infra.to_dict(),  # for information: a resume may run otherwise
    }


def curve(run: Run) -> dict[int, dict[str, float]]:
    """The metrics of every epoch so far: those the resumed checkpoint kept, then this call's."""
    return run.resumed_curve | {run.resumed_from + i: dict(m) for i, m in enumerate(run.history, 1)}


def resume(run: Run) -> None:
    """Continue from this run's newest good checkpoint, else from ``infra.init_from``'s, else start
    fresh; a checkpoint that cannot be resumed here is refused before anything is written or pruned."""
    if run.checkpoints is None:
        return
    state = run.checkpoints.load_latest() if run.infra.resume else None
    source = run.infra.init_from if state is None else None
    if source is not None:
        state = _adoptable(source)
    run.accelerator.wait_for_everyone()  # every process has read before the main process prunes
    if state is not None:
        _restore(run, state, run.infra.checkpoint_dir if source is None else source)
    run.checkpoints.discard_after(0 if state is None or source is not None else state["epoch"])
    if state is not None and source is not None:  # ours now: the source may go once training has begun
        run.checkpoints.save(state, state["epoch"], is_best=not run.infra.checkpoint_every)


def _adoptable(source: Path) -> dict[str, Any]:
    """Another run's checkpoint (a file, or the newest usable one of a directory), made this run's:
    marked with where it came from, its epoch its best so far (the parent's best epoch is not the
    weights this run has)."""
    if source.is_dir():
        state = Checkpointer(source, keep_last=1, writer=False).load_latest()
        if state is None:
            raise CheckpointError(f"cannot start from {source}: it holds no usable checkpoint")
    else:
        state = load_checkpoint(source)
        missing = [key for key in RESUME_KEYS if key not in state]
        if missing:
            raise CheckpointError(f"cannot start from {source}: it lacks {', '.join(missing)}")
    state["init_from"] = str(source)
    if "val_loss" in state:
        state["best_epoch"], state["best_val_loss"] = state["epoch"], state["val_loss"]
    return state


def _restore(run: Run, state: dict[str, Any], where: Path | None) -> None:
    """Restore ``state`` into ``run``; a checkpoint whose values are not what we wrote (a wrong type,
    a missing entry inside one) raises :class:`CheckpointError`, which a caller can answer by
    starting over (``Infra(resume=False)``), never a bare KeyError or TypeError."""
    try:
        _restore_state(run, state, where)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as exc:
        raise CheckpointError(f"cannot resume from {where}: the checkpoint is damaged ({exc!r})") from exc


def _restore_state(run: Run, state: dict[str, Any], where: Path | None) -> None:
    changes = _allowed_changes(run, state, where)
    world, saved_world = run.accelerator.num_processes, state.get("world_size", 1)
    if saved_world != world:
        raise CheckpointError(
            f"cannot resume from epoch {state['epoch']} in {where}: it was trained by "
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
        raise CheckpointError(f"cannot resume from epoch {state['epoch']} in {where}: {exc}") from exc
    run.scheduler.load_state_dict(state["scheduler"])
    apply_to_optimizer(run.optimizer, run.scheduler, run.config, {field for field, _, _ in changes})
    run.mutations = [Mutation(**m) for m in state.get("mutations", [])]
    run.mutations += [Mutation(state["epoch"], f, old, new, state.get("init_from")) for f, old, new in changes]
    if run.accelerator.scaler is not None and state.get("scaler") is not None:
        run.accelerator.scaler.load_state_dict(state["scaler"])
        run.loss_scale = None
    rng = state["rng"]
    restore_rng(rng[run.accelerator.process_index] if isinstance(rng, list) else rng)  # a list: one per rank
    run.epoch = run.resumed_from = state["epoch"]
    run.resumed_metrics = {k: float(v) for k, v in state.get("metrics", {}).items()}  # none before they were kept
    kept = state.get("curve") or ({state["epoch"]: run.resumed_metrics} if run.resumed_metrics else {})
    run.resumed_curve = {int(e): {k: float(v) for k, v in m.items()} for e, m in kept.items()}
    run.global_step, run.lr = state["global_step"], state["lr"]
    run.best_epoch, run.best_val_loss = state["best_epoch"], state["best_val_loss"]


def _allowed_changes(run: Run, state: dict[str, Any], where: Path | None) -> list[tuple[str, Any, Any]]:
    """The hyperparameters that differ from the checkpoint's, all of them in ``infra.mutable``.

    Every other ``TrainConfig`` field and the model's dropout rates must match the checkpoint's
    (``epochs`` too: the schedule's length depends on it)."""
    module = run.accelerator.unwrap_model(run.model, keep_torch_compile=False)
    changed = changed_hyperparameters(state, run.config, module)
    refused = [c for c in changed if c[0].split(":")[0] not in run.infra.mutable]
    if refused:
        what = ", ".join(f"{k}={old!r} (now {new!r})" for k, old, new in refused)
        if run.infra.mutable:
            what += f"; Infra.mutable lets only {', '.join(sorted(run.infra.mutable))} change"
        fresh = "Infra(resume=False)" if run.infra.init_from is None else "Infra(resume=False, init_from=None)"
        raise CheckpointError(
            f"cannot resume from epoch {state['epoch']} in {where}: it was trained with {what}; "
            f"resume with the same hyperparameters, or start over with {fresh}"
        )
    return changed
