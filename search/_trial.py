"""One trial: suggest -> build -> fit with a pruning hook -> tell, with MLflow alongside."""

from __future__ import annotations

import logging
import math
import shutil
import socket
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search._errors import DatabaseUnavailableError, TrialLostError
from search._reaper import FAIL_REASON_ATTR, end_dead_run
from search._resilience import retrying
from storage import set_user_attrs

if TYPE_CHECKING:
    import optuna

    from search._coordinator import Coordinator, StudyRecord
    from search._tracking import RunLogger, Tracker
    from studies import Study, StudyData
    from trainer import TrainData

log = logging.getLogger(__name__)
HOST = socket.gethostname()


@dataclass
class WorkerContext:
    """What a worker loads once and reuses for every trial."""

    study: Study
    data: StudyData
    search_train: TrainData
    record: StudyRecord
    coordinator: Coordinator
    optuna_study: optuna.Study
    tracker: Tracker
    experiment_id: str
    parent_run_id: str
    checkpoint_root: Path
    worker_id: str
    gang: Any = None
    """For a multi-process trial: rank 0's link to the other ranks (``search._gang.Gang``)."""

    def __post_init__(self) -> None:
        # Dead trials this worker reaps get their MLflow run ended as well.
        self.coordinator.on_reaped = lambda trial: end_dead_run(self.tracker, trial)


@dataclass(frozen=True)
class TrialOutcome:
    number: int
    state: str
    value: float | None
    fit_seconds: float
    wall_seconds: float
    reason: str = ""


class PruningHook:
    """Reports the study metric each epoch and asks to stop when the pruner says so."""

    def __init__(self, trial: optuna.trial.Trial, metric: str) -> None:
        self.trial = trial
        self.metric = metric
        self.pruned_epoch: int | None = None

    def __call__(self, epoch: int, metrics: Mapping[str, float]) -> bool:
        value = float(metrics[self.metric])

        def report() -> bool:  # each step is safe to repeat after a lost connection
            self.trial.report(value, step=epoch)  # also the live view's "current epoch"
            return self.trial.should_prune()

        if retrying(report, f"reporting epoch {epoch} of trial {self.trial.number}"):
            self.pruned_epoch = epoch
            return True
        return False


def params_dict(params: Any) -> dict[str, Any]:
    return asdict(params) if is_dataclass(params) and not isinstance(params, type) else dict(vars(params))


def logical_number(trial: optuna.trial.Trial) -> int:
    """Number of the first attempt of this trial (retries continue it), as read when it was claimed."""
    return int(trial._cached_frozen_trial.system_attrs.get("failed_trial", trial.number))


@contextmanager
def heartbeat(ctx: WorkerContext, trial: optuna.trial.Trial) -> Iterator[None]:
    """Record this trial's heartbeat in a thread, whatever API runs the trial."""
    storage = ctx.coordinator.storage
    interval = storage.get_heartbeat_interval()
    if not interval:
        yield
        return
    from search._reaper import keep_alive

    stop = threading.Event()
    thread = threading.Thread(
        target=keep_alive, args=(ctx.coordinator, ctx.optuna_study, trial, stop), name=f"heartbeat-{trial.number}",
        daemon=True,
    )  # fmt: skip
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def run_trial(ctx: WorkerContext, trial: optuna.trial.Trial, claimed_at: float | None = None) -> TrialOutcome:
    """Run ``trial`` to a final state; trial-level failures end it as FAIL and return normally.

    ``claimed_at`` (a ``time.perf_counter()`` value) makes the claim part of the measured overhead.
    """
    started = claimed_at or time.perf_counter()
    with heartbeat(ctx, trial):
        base = logical_number(trial)
        run = _start_run(ctx, trial, base)
        ckpt_dir = ctx.checkpoint_root / ctx.optuna_study.study_name / f"trial-{base}"
        try:
            result, hook = _fit(ctx, trial, run, ckpt_dir)
            outcome = _finish_ok(ctx, trial, run, result, hook, started)
        except DatabaseUnavailableError:
            raise  # infrastructure, not the trial: the worker stops and the trial is retried elsewhere
        except Exception as exc:  # noqa: BLE001 - every trial-level error ends the trial, not the worker
            outcome = _finish_failed(ctx, trial, run, exc, started)
    if outcome.state != "LOST":  # a lost trial's retry resumes from these checkpoints
        # Checkpoints exist so a dead attempt can be resumed; a finished trial needs none.
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    return outcome


def _start_run(ctx: WorkerContext, trial: optuna.trial.Trial, base: int) -> RunLogger:
    """The trial's MLflow run; the trial records who runs it and where its run is, in one write."""
    previous = trial._cached_frozen_trial.user_attrs.get("mlflow_run_id")  # a retry inherits its attempt's
    tags = {"hpsearch.trial": trial.number, "hpsearch.worker": ctx.worker_id, "hpsearch.host": HOST}
    if previous:
        ctx.tracker.mark_killed(previous)
        tags.update({"hpsearch.retry_of": previous, "hpsearch.logical_trial": base})
    run = ctx.tracker.start_child(ctx.experiment_id, ctx.parent_run_id, f"trial-{trial.number}", "trial", tags)
    attrs = {"worker": ctx.worker_id, "host": HOST, "mlflow_run_id": run.run_id}
    retrying(lambda: set_user_attrs(ctx.coordinator.storage, trial._trial_id, attrs), f"starting trial {trial.number}")
    return run


def _fit(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, ckpt_dir: Path) -> tuple[Any, PruningHook]:
    import trainer

    # Only suggest sees the trial, so it is safe to run again after a lost connection.
    params = retrying(lambda: ctx.study.suggest(trial), f"suggesting params for trial {trial.number}")
    if ctx.gang is not None:
        ctx.gang.send_params(trial.number, params, ckpt_dir)
    run.log_params({"trial_number": trial.number, **params_dict(params)})  # sent with the first epoch
    model = ctx.study.build_model(params, ctx.data)
    config = ctx.study.train_config(params, ctx.study.search_fidelity).replace(
        checkpoint_dir=ckpt_dir,
        resume=True,
        keep_last=2,  # two, so a damaged newest one has a fallback
    )
    hook = PruningHook(trial, ctx.record.metric)
    result = trainer.fit(model, ctx.search_train, ctx.data.val, ctx.data.task, config, hooks=[hook], sink=run)
    if ctx.gang is not None:
        trial.set_user_attr("epochs_run_per_rank", ctx.gang.gather_epochs(result.epochs_run))
    return result, hook


def _best_value(history: list[dict[str, float]], metric: str, direction: str) -> float:
    values = [h[metric] for h in history if metric in h and math.isfinite(h[metric])]
    if not values:
        raise ValueError(f"the study metric {metric!r} was never reported")
    return min(values) if direction == "minimize" else max(values)


def _curve(ctx: WorkerContext, trial: optuna.trial.Trial, result: Any) -> list[dict[str, float]]:
    """The metric of every epoch: a resumed attempt's history lacks those before its checkpoint
    (all of them when it resumed after the last epoch), but its trial carries their reports."""
    if not result.resumed_from_epoch:
        return list(result.history)
    frozen = retrying(lambda: ctx.coordinator.storage.get_trial(trial._trial_id), f"reading trial {trial.number}")
    return [*result.history, *({ctx.record.metric: v} for v in frozen.intermediate_values.values())]


def _finish_ok(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, result: Any, hook: PruningHook,
               started: float) -> TrialOutcome:  # fmt: skip
    from optuna.trial import TrialState

    pruned = hook.pruned_epoch is not None
    value = None if pruned else _best_value(_curve(ctx, trial, result), ctx.record.metric, ctx.record.direction)
    state = "PRUNED" if pruned else "COMPLETE"
    tags: dict[str, Any] = {"hpsearch.state": state, "hpsearch.epochs_run": result.epochs_run}
    if pruned:
        tags["hpsearch.pruned_epoch"] = hook.pruned_epoch
    run.finish(tags, "FINISHED")  # waits for the epochs' batches too
    # Service overhead: all worker time but training, so the per-epoch pruner reports and MLflow
    # batches (hooks and sink, inside fit; the batches are written while the next epoch trains,
    # the wait for the last is here) count; only the final attributes and tell are left out.
    wall = time.perf_counter() - started
    training = result.fit_seconds - result.callback_seconds
    attrs = {
        "epochs_run": result.epochs_run,
        "best_epoch": result.best_epoch,
        "wall_seconds": round(wall, 3),
        "fit_seconds": round(result.fit_seconds, 3),
        "overhead_seconds": round(max(0.0, wall - training), 4),
        "samples_per_second": round(result.samples_per_second, 1),
        "resumed_from_epoch": result.resumed_from_epoch,
    }
    _record_attrs(ctx, trial, attrs)
    _tell(ctx, trial, TrialState.PRUNED if pruned else TrialState.COMPLETE, value)
    return TrialOutcome(trial.number, state, value, result.fit_seconds, wall)


def _record_attrs(ctx: WorkerContext, trial: optuna.trial.Trial, attrs: Mapping[str, Any]) -> None:
    retrying(lambda: set_user_attrs(ctx.coordinator.storage, trial._trial_id, attrs), f"recording trial {trial.number}")


def _tell(ctx: WorkerContext, trial: optuna.trial.Trial, state: Any, value: float | None = None,
          reason: str | None = None) -> None:  # fmt: skip
    """Tell the final state exactly once, even when the reply to a committed tell was lost.

    Raises:
        TrialLostError: another process (a reaper) finished the trial first.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    def tell() -> Any:
        # tell() reads the trial back after its write (or, when the trial was already finished,
        # returns it as it found it): either way its answer says who finished it.
        try:
            if state == TrialState.COMPLETE:
                return ctx.optuna_study.tell(trial, value, skip_if_finished=True)
            return ctx.optuna_study.tell(trial, state=state, skip_if_finished=True)
        except UpdateFinishedTrialError:  # finished between tell's own look and its write
            return ctx.coordinator.storage.get_trial(trial._trial_id)

    frozen = retrying(tell, f"finishing trial {trial.number}")
    # A reaper fails a trial too, but with its own reason.
    if frozen.state != state or (reason is not None and frozen.user_attrs.get(FAIL_REASON_ATTR) != reason):
        raise TrialLostError(f"trial {trial.number} was finished as {frozen.state.name} by another process")


def _finish_failed(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, exc: Exception,
                   started: float) -> TrialOutcome:  # fmt: skip
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    reason = fail_reason(exc)
    try:
        if isinstance(exc, TrialLostError | UpdateFinishedTrialError) or not _still_running(ctx, trial):
            return _abandon(ctx, trial, run, started)
        log.warning("trial %d failed: %s", trial.number, reason)
        attrs = {FAIL_REASON_ATTR: reason, "wall_seconds": round(time.perf_counter() - started, 3)}
        _record_attrs(ctx, trial, attrs)
        _record_failure_in_mlflow(ctx, run, exc, reason)
        _tell(ctx, trial, TrialState.FAIL, reason=reason)
    except (TrialLostError, UpdateFinishedTrialError):
        return _abandon(ctx, trial, run, started)
    finally:
        _free_memory()
    return TrialOutcome(trial.number, "FAIL", None, 0.0, time.perf_counter() - started, reason)


def _record_failure_in_mlflow(ctx: WorkerContext, run: RunLogger, exc: Exception, reason: str) -> None:
    _flush_quietly(run)
    try:
        ctx.tracker.set_tags(run.run_id, {"hpsearch.state": "FAIL", "hpsearch.fail_reason": reason})
        if not _is_expected(exc):
            ctx.tracker.client.log_text(run.run_id, "".join(traceback.format_exception(exc)), "traceback.txt")
        ctx.tracker.end_run(run.run_id, "FAILED")
    except DatabaseUnavailableError:
        raise
    except Exception as mlflow_exc:  # noqa: BLE001 - bookkeeping trouble must not leave the trial RUNNING
        log.warning("could not record the failure of run %s in MLflow: %s", run.run_id, mlflow_exc)


def _still_running(ctx: WorkerContext, trial: optuna.trial.Trial) -> bool:
    from optuna.trial import TrialState

    frozen = retrying(lambda: ctx.coordinator.storage.get_trial(trial._trial_id), f"reading trial {trial.number}")
    return bool(frozen.state == TrialState.RUNNING)


def _flush_quietly(run: RunLogger) -> None:
    """Let the run's queued writes land before its end is recorded; their failure is not the trial's."""
    try:
        run.flush()
    except DatabaseUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - bookkeeping only
        log.warning("could not write to MLflow run %s: %s", run.run_id, exc)


def _abandon(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, started: float) -> TrialOutcome:
    """Give up a trial that a reaper failed while this worker was cut off: its retry owns it now."""
    log.warning("trial %d was failed by another process while this worker was cut off; its retry takes over",
                trial.number)  # fmt: skip
    _flush_quietly(run)
    try:
        ctx.tracker.set_tags(run.run_id, {"hpsearch.state": "FAIL", "hpsearch.fail_reason": "worker lost"})
        ctx.tracker.end_run(run.run_id, "KILLED")
    except DatabaseUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - bookkeeping only
        log.warning("could not end MLflow run %s: %s", run.run_id, exc)
    return TrialOutcome(trial.number, "LOST", None, 0.0, time.perf_counter() - started, "taken over by its retry")


def _is_expected(exc: Exception) -> bool:
    import torch

    import trainer

    return isinstance(exc, trainer.DivergenceError | torch.OutOfMemoryError)


def fail_reason(exc: Exception) -> str:
    import torch

    import trainer

    if isinstance(exc, trainer.DivergenceError):
        return f"diverged at epoch {exc.epoch}"
    if isinstance(exc, torch.OutOfMemoryError):
        first = (str(exc).splitlines() or [""])[0][:200]
        return first if first.startswith("CUDA out of memory") else f"CUDA out of memory: {first}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}".rstrip(": ")


def _free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
