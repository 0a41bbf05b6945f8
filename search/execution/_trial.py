"""One trial: suggest -> build -> fit with a pruning hook -> tell, with MLflow alongside."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.coordination import heartbeat, retrying
from search.exceptions import DatabaseUnavailableError, EnvironmentFailure
from search.execution._context import TrialOutcome, WorkerContext, group_sharding
from search.execution._environment import environment_failure
from search.execution._exploit import LINEAGE_ATTRS
from search.execution._finish import finish_failed, finish_ok, finish_unstarted, requeue
from search.execution._folds import fit_folds
from search.execution._pruning import PruningHook
from search.execution._refit import fit_or_start_over
from search.execution._suggest import suggest_params
from search.execution._watchdog import Progress, watchdog
from search.settings import (
    exploiting_spec,
    params_dict,
    patience_spare,
    pausing_spec,
    resolve_patience,
    study_dir,
)
from search.tracking import deployment_metrics
from storage import cached_frozen_trial, set_user_attrs, trial_id

if TYPE_CHECKING:
    import optuna

    from search.tracking import RunLogger

log = logging.getLogger(__name__)
HOST = socket.gethostname()


def logical_number(trial: optuna.trial.Trial) -> int:
    """Number of the first attempt of this trial (retries continue it), as read when it was claimed."""
    return int(cached_frozen_trial(trial).system_attrs.get("failed_trial", trial.number))


def run_trial(ctx: WorkerContext, trial: optuna.trial.Trial, claimed_at: float | None = None) -> TrialOutcome:
    """Run ``trial`` to a final state; trial-level failures end it as FAIL and return normally.

    ``claimed_at`` (a ``time.perf_counter()`` value) makes the claim part of the measured overhead.

    Raises:
        EnvironmentFailure: this machine failed the trial (a full or read-only disk, a path too
            long): the trial is requeued, spending none of its retries, and the worker must stop.
    """
    started = claimed_at or time.perf_counter()
    if claimed_at is None:
        ctx.cpu_at_claim = time.process_time()
    # The watchdog ends first: a trial being finished normally is never failed as stalled.
    with heartbeat(ctx.coordinator, ctx.optuna_study, trial), watchdog(ctx, trial) as progress:
        base = logical_number(trial)
        try:
            run = _start_run(ctx, trial, base)
        except DatabaseUnavailableError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. a tracking server's HTTP 500: this trial fails, not the worker
            return finish_unstarted(ctx, trial, exc, started)
        ckpt_dir = study_dir(ctx.checkpoint_root, ctx.optuna_study.study_name) / f"trial-{base}"
        board = _board(ctx, trial)
        outcome: TrialOutcome | None = None
        broken: str | None = None
        patience = resolve_patience(ctx.record.settings.patience, ctx.record.search_epochs)
        folds = bool(ctx.data.folds)  # k-fold: the hook reports folds, patience ends each fold's training
        hook = PruningHook(trial, ctx.record.metric, ctx.pruner_trials, patience=0 if folds else patience,
                           maximize=ctx.record.direction == "maximize",
                           spare=patience_spare(ctx.record.settings.patience))  # fmt: skip
        try:
            if folds:
                result, deployment = fit_folds(ctx, trial, run, ckpt_dir, hook, progress or Progress(), board, patience)
            else:
                result, deployment = _fit(ctx, trial, run, ckpt_dir, hook, progress, board)
            outcome = finish_ok(ctx, trial, run, result, hook, started, deployment)
        except DatabaseUnavailableError:
            raise  # infrastructure, not the trial: the worker stops and the trial is retried elsewhere
        except Exception as exc:  # noqa: BLE001 - every trial-level error ends the trial, not the worker
            broken = environment_failure(exc, ckpt_dir)
            if broken is None:
                outcome = finish_failed(ctx, trial, run, exc, started, hook.unstored)
            else:  # the next machine (or this one, freed) resumes it; the budget is not spent here
                outcome = requeue(ctx, trial, run, f"worker's machine: {broken}", started, free=True)
        finally:
            if board is not None:
                # Its hparams metric is the per-epoch one: the trial's value only when that is the objective.
                _close_board(board, ctx.record.metric, outcome, valued=not ctx.record.objectives)
    if broken is not None:
        raise EnvironmentFailure(f"{broken} in trial {trial.number}, which is requeued; this worker stops")
    # A retry resumes from these checkpoints, as does a paused trial once a worker resumes it.
    # A replaced trial's folder holds the checkpoint its continuation goes on from; under
    # population-based training, any trial's checkpoints may be copied until the study ends.
    kept = outcome.state in ("LOST", "PAUSED", "REPLACED") or exploiting_spec(ctx.optuna_study.pruner) is not None
    if not kept and not outcome.retried:
        # Checkpoints exist so a dead attempt can be resumed; a finished trial needs none.
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        with contextlib.suppress(OSError):  # the study's folder, once its last trial's is gone (not if others are left)
            ckpt_dir.parent.rmdir()
    return outcome


def _start_run(ctx: WorkerContext, trial: optuna.trial.Trial, base: int) -> RunLogger:
    """The trial's MLflow run; the trial records who runs it and where its run is, in one write.

    A worker's first trial may start before MLflow is imported (seconds, on the tracker's writer
    thread) or, for an early worker, before ``search start`` has created the study's parent run:
    it records who runs it at once (Ctrl-C and a group's supervisor find their trials by it), and
    its run is created on the tracker's writer thread while it trains, then recorded on the trial too
    (``Tracker.open_child``; if that fails, the trial stops at its next epoch). Later trials create
    their run here, as that costs a short trial less than two threads taking turns.
    """
    frozen = cached_frozen_trial(trial)
    inherited = frozen.user_attrs
    previous = inherited.get("mlflow_run_id")  # a retry inherits its attempt's, as does a resumption
    # A resumption continues the paused attempt it names; a retry of one (its worker died) inherits the name.
    follows = (frozen.system_attrs.get("retry_history") or [None])[-1]
    resumed = "resumed_from" in inherited and inherited["resumed_from"] == follows
    tags = {"hpsearch.trial": trial.number, "hpsearch.worker": ctx.worker_id, "hpsearch.host": HOST}
    attrs = {"worker": ctx.worker_id, "host": HOST}
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")  # the GPUs this worker was given (by us or by a scheduler)
    if gpus:
        tags["hpsearch.gpus"] = attrs["gpus"] = gpus
    if previous and resumed:  # a paused trial's run ended FINISHED: it stays so
        tags.update({"hpsearch.resumed_from": previous, "hpsearch.resumed_from_trial": inherited["resumed_from"],
                     "hpsearch.logical_trial": base})  # fmt: skip
        previous = None
    elif previous:
        tags.update({"hpsearch.retry_of": previous, "hpsearch.logical_trial": base})
    if "pbt_parent" in inherited:  # population-based training: whose checkpoint, when, what changed
        tags.update({f"hpsearch.{k}": json.dumps(inherited[k]) for k in LINEAGE_ATTRS if k in inherited})

    def record(more: dict[str, str]) -> None:
        what = f"starting trial {trial.number}"
        retrying(lambda: set_user_attrs(ctx.coordinator.storage, trial_id(trial), {**attrs, **more}), what)

    name, on_created = f"trial-{trial.number}", lambda run_id: record({"mlflow_run_id": run_id})
    if ctx.tracker.ready and ctx.parent.known:
        return ctx.tracker.start_child(ctx.experiment_id, ctx.parent_run_id, name, "trial", tags, on_created, previous)
    record({})
    return ctx.tracker.open_child(ctx.parent.ids, name, "trial", tags, on_created, previous)


def _board(ctx: WorkerContext, trial: optuna.trial.Trial) -> Any:
    """The trial's TensorBoard sink when the worker was asked for one (``--tensorboard``)."""
    if ctx.tensorboard_dir is None:
        return None
    import trainer

    log_dir = study_dir(ctx.tensorboard_dir, ctx.optuna_study.study_name) / f"trial-{trial.number}"
    return trainer.TensorBoardSink(log_dir, metrics=(ctx.record.metric,))


def _close_board(board: Any, metric: str, outcome: TrialOutcome | None, valued: bool = True) -> None:
    """End the trial's TensorBoard run with its state; a failure here never fails the trial."""
    status = {"COMPLETE": "success", "PRUNED": "success", "FAIL": "failure"}.get(outcome.state if outcome else "")
    final = {metric: outcome.value} if valued and outcome is not None and outcome.value is not None else {}
    try:
        board.close(status or "unknown", final)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not finish the TensorBoard run of trial %s: %s", outcome and outcome.number, exc)


def _fit(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, ckpt_dir: Path, hook: PruningHook,
         progress: Progress | None = None, board: Any = None) -> tuple[Any, dict[str, float]]:  # fmt: skip
    """The trial's fit, and its model's deployment metrics (``search.tracking._deployment``: timed unless
    it was pruned; the seconds that takes count in the trial's ``overhead_seconds``, being no training)."""
    import trainer
    from studies import study_infra

    progress = progress or Progress()  # without a watchdog, nobody looks at it
    params = suggest_params(ctx.study, ctx.coordinator.storage, trial)
    config = ctx.study.train_config(params, ctx.study.search_fidelity)
    infra = study_infra(ctx.study, params, ctx.study.search_fidelity).replace(
        checkpoint_dir=ckpt_dir,
        resume=True,
        keep_last=2,  # two, so a damaged newest one has a fallback
        checkpoint_every=ctx.record.settings.checkpoint_every,  # ranks of a group follow rank 0's decisions
        checkpoint_last=False,  # a finished trial's checkpoints are deleted unread (run_trial)
    )
    pruner: Any = ctx.optuna_study.pruner
    if pausing_spec(pruner) is not None:  # where it may pause, it resumes later
        infra = infra.replace(checkpoint_at=frozenset(pruner.rungs))
    if exploiting_spec(pruner) is not None:  # each check epoch's, to be copied
        checks = frozenset(range(pruner.interval, ctx.record.search_epochs, pruner.interval))
        infra = infra.replace(checkpoint_at=checks, keep_last=len(checks) + 1)
    if "pbt_parent" in cached_frozen_trial(trial).user_attrs:  # goes on from a copy, mutable params changed
        from studies import mutable_params

        infra = infra.replace(mutable=frozenset(mutable_params(ctx.study).values()))
    if ctx.gang is not None:
        config = config.replace(sharding=group_sharding())
        retrying(lambda: trial.set_user_attr("sharding", config.sharding), f"recording trial {trial.number}")
        ctx.gang.send_params(trial.number, params, ckpt_dir)
    run.log_params({"trial_number": trial.number, **params_dict(params)})  # sent with the first epoch
    sink: Any = run
    if board is not None:
        board.hparams = params_dict(params)
        sink = trainer.FanOut(run, board)

    built: list[Any] = []

    def fit(config: Any, infra: Any) -> Any:
        model = ctx.study.build_model(params, ctx.data)
        built[:] = [model]
        progress.watch(model)  # every finished training or validation batch is progress, as is every step
        return trainer.fit(model, ctx.search_train, ctx.data.val, ctx.data.task, config, infra=infra, hooks=[hook],
                           sink=sink, on_step=progress.step)  # fmt: skip

    result = fit_or_start_over(fit, config, infra, f"trial {trial.number}")
    if ctx.gang is not None:
        trial.set_user_attr("epochs_run_per_rank", ctx.gang.gather_epochs(result.epochs_run))
    deployment = deployment_metrics(built[0], ctx.data.val, result, mixed_precision=config.mixed_precision,
                                    batch=ctx.record.settings.latency_batch,
                                    timed=hook.pruned_epoch is None)  # fmt: skip
    return result, deployment
