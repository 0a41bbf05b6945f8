"""How a trial ends: told exactly once as COMPLETE, PRUNED or FAIL, or given up to the retry that owns it."""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from search.coordination import FAIL_REASON_ATTR, retrying
from search.exceptions import DatabaseUnavailableError, TrialLostError
from search.execution._context import TrialOutcome, WorkerContext
from search.execution._exploit import replace_trial
from search.execution._machine import ENV_GPU_MEMORY_FRACTION
from search.execution._metrics import best_value, final_metrics, speed_attrs
from search.execution._objectives import scored
from search.settings import PAUSED_AT_ATTR, exploiting_spec, pausing_spec
from storage import filter_study, finish_trial, mask, set_cached_trials, set_user_attrs, trial_id

if TYPE_CHECKING:
    import optuna

    from search.execution._pruning import PruningHook
    from search.tracking import RunLogger

log = logging.getLogger(__name__)
Steps = dict[int, float]


def _curve(ctx: WorkerContext, trial: optuna.trial.Trial, result: Any) -> tuple[list[dict[str, float]], Steps]:
    """The metric of every epoch, and the epochs to store with the tell: a resumed attempt's trial
    carries the reports before its checkpoint, but not those an attempt before trained (they are in
    the checkpoint's curve) and did not store."""
    if not result.resumed_from_epoch:
        return list(result.history), {}
    tid, metric = trial_id(trial), ctx.record.metric
    storage = ctx.coordinator.storage
    reported = retrying(lambda: storage.get_trial(tid), f"reading trial {trial.number}").intermediate_values
    missing = {e: m[metric] for e, m in result.resumed_curve.items() if e not in reported and metric in m}
    return [*result.history, *({metric: v} for v in (reported | missing).values())], missing


def finish_ok(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, result: Any, hook: PruningHook,
              started: float, deployment: Mapping[str, float] | None = None) -> TrialOutcome:  # fmt: skip
    """Tell a trained trial's state; its final metrics (``deployment``'s too) go on the trial and MLflow."""
    from optuna.trial import TrialState

    pruned = hook.pruned_epoch is not None
    # Freeze-thaw: "pruned" is paused, told as PRUNED (what it is if it never resumes), checkpoint kept.
    paused = pruned and pausing_spec(ctx.optuna_study.pruner) is not None
    # Population-based training: "pruned" is replaced; its continuation is queued before the tell.
    replaced = pruned and exploiting_spec(ctx.optuna_study.pruner) is not None
    replaced = replaced and replace_trial(ctx, trial, int(hook.pruned_epoch or 0)) is not None
    curve, missing = _curve(ctx, trial, result)  # a resumed attempt's epochs its checkpoint has, pruned too
    best = None if pruned else best_value(curve, ctx.record.metric, ctx.record.direction)
    # The objectives' and constraints' values (deployment metrics included): before the run is finished.
    final = final_metrics(result.history or [result.resumed_metrics]) | dict(deployment or {})
    value, scores, constraints = scored(ctx, trial.number, final, best, pruned)
    state = "PAUSED" if paused else "REPLACED" if replaced else "PRUNED" if pruned else "COMPLETE"
    tags: dict[str, Any] = {"hpsearch.state": state, "hpsearch.epochs_run": result.epochs_run}
    if pruned:
        tags[f"hpsearch.{'paused' if paused else 'replaced' if replaced else 'pruned'}_epoch"] = hook.pruned_epoch
    stopped = None if pruned or not result.stopped_early else hook.stopped_epoch
    if stopped is not None:  # --patience: complete, its value its best epoch's
        tags["hpsearch.stopped_epoch"] = stopped
    if deployment:  # at the last epoch's step, beside the model's last validation metrics
        run.log(deployment, step=result.epochs_run)
        run.log_params({"latency_batch": ctx.record.settings.latency_batch})
    run.finish(tags, "FINISHED")  # waits for the epochs' batches too
    # Service overhead: all worker time but training, so the pruner's reports and MLflow's batches (inside
    # fit, written while the next epoch trains; the wait for the last is here) count, not the final tell.
    wall = time.perf_counter() - started
    training = result.fit_seconds - result.callback_seconds
    attrs = {
        "epochs_run": result.epochs_run,
        "best_epoch": result.best_epoch,
        "wall_seconds": round(wall, 3),
        "fit_seconds": round(result.fit_seconds, 3),
        "overhead_seconds": round(max(0.0, wall - training), 4),
        # The worker process's CPU (every thread) from the claim: training, service, MLflow writers.
        "cpu_seconds": round(time.process_time() - ctx.cpu_at_claim, 4),
        "samples_per_second": round(result.samples_per_second, 1),
        "resumed_from_epoch": result.resumed_from_epoch,
    }
    if stopped is not None:
        attrs["stopped_epoch"] = stopped
    if paused:
        attrs[PAUSED_AT_ATTR] = hook.pruned_epoch
    if replaced:
        attrs["exploited_at"] = hook.pruned_epoch
    if getattr(result, "mutations", None):  # what a replaced trial's continuation changed, and when
        attrs["mutations"] = [m.to_dict() for m in result.mutations]
    attrs |= speed_attrs(result.history) | ({"final_metrics": final} if final else {}) | scores
    _tell(ctx, trial, TrialState.PRUNED if pruned else TrialState.COMPLETE, value, attrs=attrs,
          steps=missing | hook.unstored, system=constraints)  # fmt: skip
    return TrialOutcome(trial.number, state, value[0] if isinstance(value, list) else value, result.fit_seconds, wall)


def _record_attrs(ctx: WorkerContext, trial: optuna.trial.Trial, attrs: Mapping[str, Any]) -> None:
    retrying(lambda: set_user_attrs(ctx.coordinator.storage, trial_id(trial), attrs), f"recording trial {trial.number}")


def _tell(ctx: WorkerContext, trial: optuna.trial.Trial, state: Any, value: float | list[float] | None = None,
          reason: str | None = None, attrs: Mapping[str, Any] | None = None, steps: Mapping[int, float] | None = None,
          system: Mapping[str, float] | None = None) -> None:  # fmt: skip
    """Tell the final state (and write ``attrs``, and the reported values not stored yet, ``steps``)
    exactly once, even when the reply to a committed tell was lost: what Optuna's ``tell`` does, in
    one transaction (``storage.finish_trial``).

    Raises:
        TrialLostError: another process (a reaper) finished the trial first.
    """
    study = ctx.optuna_study

    def after_trial(frozen: optuna.trial.FrozenTrial, values: list[float] | None) -> None:
        study.sampler.after_trial(filter_study(study, frozen), frozen, state, values)

    def tell() -> Any:
        set_cached_trials(study, None)  # as tell: Optuna's cache holds within a trial only
        return finish_trial(ctx.coordinator.storage, trial_id(trial), state, value, attrs or {}, after_trial, steps,
                            system)  # fmt: skip

    # Found finished: by this very write whose reply was lost (the same state), or by another process
    # (a reaper fails a trial too, but with its own reason).
    found = retrying(tell, f"finishing trial {trial.number}")
    if found is not None and (
        found.state != state or (reason is not None and found.user_attrs.get(FAIL_REASON_ATTR) != reason)
    ):
        raise TrialLostError(f"trial {trial.number} was finished as {found.state.name} by another process")


def finish_failed(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, exc: Exception,
                   started: float, steps: Mapping[int, float] | None = None) -> TrialOutcome:  # fmt: skip
    """Fail the trial (storing ``steps``, its reported values not stored yet), or give it to the
    retry that another process queued for it."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    reason = fail_reason(exc)
    try:
        if isinstance(exc, TrialLostError | UpdateFinishedTrialError) or not _still_running(ctx, trial):
            return _abandon(ctx, trial, run, started)
        # Across nodes a peer's loss is the node's, not the trial's; on one node, a rank that died
        # did so of the trial (a bug, out of memory), and the trial fails as any other would.
        if ctx.gang is not None and ctx.gang.spans_nodes and lost_peer(exc):
            return requeue(ctx, trial, run, f"lost a node of its process group: {reason}", started)
        log.warning("trial %d failed: %s", trial.number, reason)
        attrs = {FAIL_REASON_ATTR: reason, "wall_seconds": round(time.perf_counter() - started, 3)}
        _record_attrs(ctx, trial, attrs)
        _record_failure_in_mlflow(ctx, run, exc, reason)
        _tell(ctx, trial, TrialState.FAIL, reason=reason, steps=steps)
    except (TrialLostError, UpdateFinishedTrialError):
        return _abandon(ctx, trial, run, started)
    finally:
        _free_memory()
    return TrialOutcome(trial.number, "FAIL", None, 0.0, time.perf_counter() - started, reason)


def finish_unstarted(ctx: WorkerContext, trial: optuna.trial.Trial, exc: Exception, started: float) -> TrialOutcome:
    """Fail a trial whose start could not be recorded or whose MLflow run could not be created
    (nothing trained, nothing to record in MLflow), or leave one that another process failed first
    to its retry."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    if isinstance(exc, UpdateFinishedTrialError | TrialLostError):  # reaped while this worker was cut off
        log.warning("trial %d was failed by another process before it started here; its retry takes over", trial.number)
        return TrialOutcome(trial.number, "LOST", None, 0.0, time.perf_counter() - started, "taken over by its retry")
    reason = fail_reason(exc)  # a RunStartError's says "MLflow run could not start: ..."
    log.warning("trial %d failed: %s", trial.number, reason)
    try:
        _record_attrs(ctx, trial, {FAIL_REASON_ATTR: reason, "wall_seconds": round(time.perf_counter() - started, 3)})
        _tell(ctx, trial, TrialState.FAIL, reason=reason)
    except (TrialLostError, UpdateFinishedTrialError):
        return TrialOutcome(trial.number, "LOST", None, 0.0, time.perf_counter() - started, "taken over by its retry")
    return TrialOutcome(trial.number, "FAIL", None, 0.0, time.perf_counter() - started, reason)


def _record_failure_in_mlflow(ctx: WorkerContext, run: RunLogger, exc: Exception, reason: str) -> None:
    _flush_quietly(run)
    text = None if _is_expected(exc) else (mask("".join(traceback.format_exception(exc))), "traceback.txt")
    try:
        run.end("FAILED", {"hpsearch.state": "FAIL", "hpsearch.fail_reason": reason}, text)
    except DatabaseUnavailableError:
        raise
    except Exception as mlflow_exc:  # noqa: BLE001 - bookkeeping trouble must not leave the trial RUNNING
        log.warning("could not record the failure of run %s in MLflow: %s", run.run_id, mlflow_exc)


def _still_running(ctx: WorkerContext, trial: optuna.trial.Trial) -> bool:
    from optuna.trial import TrialState

    frozen = retrying(lambda: ctx.coordinator.storage.get_trial(trial_id(trial)), f"reading trial {trial.number}")
    return bool(frozen.state == TrialState.RUNNING)


def _flush_quietly(run: RunLogger) -> None:
    """Let the run's queued writes land before its end is recorded; their failure is not the trial's."""
    try:
        run.flush()
    except DatabaseUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - bookkeeping only
        log.warning("could not write to MLflow run %s: %s", run.run_id, exc)


_PEER_LOST = ("connection closed by peer", "connection reset by peer", "broken pipe", "remote process exited",
              "communicator was aborted", "socket timeout")  # fmt: skip


def lost_peer(exc: BaseException) -> bool:
    """Whether a collective failed because another rank of the group went away (its node was lost,
    killed or cut off), not because of the trial: gloo's and NCCL's words for it."""
    import torch.distributed as dist

    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        if isinstance(current, dist.DistNetworkError) or says_peer_lost(str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


def says_peer_lost(text: str) -> bool:
    return any(words in text.lower() for words in _PEER_LOST)


def requeue(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, reason: str, started: float,
            free: bool = False) -> TrialOutcome:  # fmt: skip
    """Fail a trial its process group could not finish through no fault of its own, and queue its
    retry (resumed from its last checkpoint by the next group), as a reaper does for a dead worker;
    a ``free`` retry spends none of ``--max-retries`` (the worker's machine failed, not the trial)."""
    import storage as st
    from search.coordination import fail_and_retry

    _flush_quietly(run)  # first: a run still being created records its id on the trial, which must still run
    with ctx.coordinator.lock() as conn:
        st.check_lock(conn)
        failed = fail_and_retry(ctx.coordinator.storage, ctx.optuna_study, trial_id(trial), reason, free)
    if failed is None:
        return _abandon(ctx, trial, run, started)
    retry = "queued its retry" if failed[1] else "no retries left"
    log.warning("trial %d failed: %s; %s", trial.number, reason, retry)
    try:
        run.end("KILLED", {"hpsearch.state": "FAIL", "hpsearch.fail_reason": reason})
    except DatabaseUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - bookkeeping only; the retry marks it KILLED when it starts
        log.warning("could not end MLflow run %s: %s", run.run_id, exc)
    return TrialOutcome(trial.number, "FAIL", None, 0.0, time.perf_counter() - started, reason, retried=failed[1])


def _abandon(ctx: WorkerContext, trial: optuna.trial.Trial, run: RunLogger, started: float) -> TrialOutcome:
    """Give up a trial that a reaper failed while this worker was cut off: its retry owns it now."""
    log.warning("trial %d was failed by another process while this worker was cut off; its retry takes over",
                trial.number)  # fmt: skip
    _flush_quietly(run)
    try:
        run.end("KILLED", {"hpsearch.state": "FAIL", "hpsearch.fail_reason": "worker lost"})
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
    """The first line of what went wrong, passwords in URLs masked (it is stored on the trial)."""
    return mask(_reason(exc))


def _reason(exc: Exception) -> str:
    import torch

    import trainer
    from search.tracking import RunStartError

    if isinstance(exc, RunStartError):
        return str(exc)
    if isinstance(exc, trainer.DivergenceError):
        return f"diverged at epoch {exc.epoch}"
    if isinstance(exc, torch.OutOfMemoryError):
        first = (str(exc).splitlines() or [""])[0][:200]
        return (first if first.startswith("CUDA out of memory") else f"CUDA out of memory: {first}") + _cap()
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}".rstrip(": ")


def _cap() -> str:
    """What an out-of-memory reason adds when this worker's share of its GPU was capped."""
    value = os.environ.get(ENV_GPU_MEMORY_FRACTION, "")
    try:
        fraction = float(value)
    except ValueError:
        return ""
    if not 0 < fraction < 1:
        return ""
    return (f" [this worker's cap: {fraction:.0%} of the GPU's memory; fewer --workers-per-gpu or a larger "
            "--gpu-memory-fraction give it more]")  # fmt: skip


def _free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
