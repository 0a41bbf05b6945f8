"""A running trial's progress watchdog: a trial that stops making progress is failed and its worker exits.

A training thread that hangs (a deadlocked data loader, a rank stuck in a collective) while the
heartbeat thread beats would keep its trial RUNNING forever. Progress is a finished training step
(``trainer.fit``'s ``on_step``) or a finished forward pass of the trial's model (a training
micro-batch or a validation batch, so a long validation is progress too), counted from the
trial's start, so a loader that hangs before the first step is caught as well. After
``stall_timeout`` seconds without any, the watchdog thread fails the trial with its reason, queues
its retry (as the reaper does for a dead worker's trial), ends its MLflow run FAILED and, since a
hung thread cannot be stopped, ends the worker process with :data:`EXIT_STALLED`, its own child
processes first (a DataLoader's workers, which a hung loader leaves waiting for good). ``search
start`` starts a fresh worker in its place; other supervisors (Slurm, Kubernetes, compose) restart it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import storage as st
from search.coordination import OUTAGE, fail_and_retry

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from search.execution._context import WorkerContext

log = logging.getLogger(__name__)

EXIT_STALLED = 70
"""A worker's exit code after the watchdog failed its stalled trial (EX_SOFTWARE)."""
ENV_STALL_TIMEOUT = "HPSEARCH_STALL_TIMEOUT"
"""Set by ``search worker --stall-timeout``: overrides the study's value in this process and its children."""
BOOKKEEPING_S = 60.0
"""How long failing the trial and ending its run may take before the process exits regardless."""


def stall_limit(stored: int) -> float:
    """This worker's limit in seconds (0: off): its ``--stall-timeout`` if given, else the study's."""
    override = os.environ.get(ENV_STALL_TIMEOUT)
    return float(override) if override else float(stored)


class Progress:
    """When the trial last finished a step or a batch; its methods are the trainer's callbacks."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.steps = 0

    def step(self) -> None:
        """``trainer.fit(on_step=...)``: an optimizer step finished."""
        self.steps += 1
        self.last = time.monotonic()

    def batch(self, *_: Any) -> None:
        """A forward hook of the trial's model: a training micro-batch or a validation batch finished."""
        self.last = time.monotonic()

    def watch(self, model: Any) -> None:
        """Count every finished forward pass of ``model`` (an ``nn.Module``) as progress."""
        model.register_forward_hook(self.batch)

    def idle(self) -> float:
        return time.monotonic() - self.last


@contextmanager
def watchdog(ctx: WorkerContext, trial: optuna.trial.Trial,
             on_exit: Callable[[int], Any] | None = None) -> Iterator[Progress]:  # fmt: skip
    """Watch ``trial``'s progress while the block runs; see the module docstring."""
    progress = Progress()
    limit = stall_limit(ctx.record.settings.stall_timeout)
    if limit <= 0:
        yield progress
        return
    stop = threading.Event()
    thread = threading.Thread(target=_watch, args=(ctx, trial, progress, limit, stop, on_exit or _exit_tree),
                              name=f"watchdog-{trial.number}", daemon=True)  # fmt: skip
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join(timeout=5)


def _watch(ctx: WorkerContext, trial: optuna.trial.Trial, progress: Progress, limit: float,
           stop: threading.Event, on_exit: Callable[[int], Any]) -> None:  # fmt: skip
    while progress.idle() < limit:
        if stop.wait(min(1.0, limit / 4)):
            return
        if OUTAGE.since is not None:
            # The database is what the trial waits for: the worker rides that out or exits 75 itself.
            progress.last = time.monotonic()
    reason = (f"stalled: no training step or validation batch finished for {progress.idle():.0f} s "
              f"(--stall-timeout {limit:g})")  # fmt: skip
    log.error("trial %d %s; failing it, queueing its retry and ending this worker (exit code %d)",
              trial.number, reason, EXIT_STALLED)  # fmt: skip
    done: list[bool] = []
    helper = threading.Thread(target=lambda: done.append(_give_up(ctx, trial, reason)), daemon=True)
    helper.start()
    helper.join(BOOKKEEPING_S)
    if done == [False]:  # its own tell (or a reaper) got there first: training was not hung
        log.warning("trial %d finished while it was being failed as stalled; the worker goes on", trial.number)
        return
    if stop.is_set():  # the trial's thread came back after all (its tell found the trial failed)
        return
    _flush()
    on_exit(EXIT_STALLED)


def _give_up(ctx: WorkerContext, trial: optuna.trial.Trial, reason: str) -> bool:
    """Fail the trial and queue its retry; False when it had already finished. Never raises."""
    try:
        # A first trial's run may still be on its way (MLflow's import, seconds): its id is then
        # not on the trial yet, and once the trial is failed its creator could not record it.
        ctx.tracker.wait_for_opened(BOOKKEEPING_S / 2)
        failed = fail_stalled(ctx, trial, reason)
    except Exception as exc:  # noqa: BLE001 - the process exits anyway; reapers fail the trial as dead
        log.warning("could not fail stalled trial %d (%s); it will be reaped as dead", trial.number, exc)
        return True
    if failed is not None:
        _end_run(ctx, failed, reason)
    return failed is not None


def fail_stalled(ctx: WorkerContext, trial: optuna.trial.Trial, reason: str) -> FrozenTrial | None:
    """Queue the retry of ``trial`` and fail it with ``reason``, under the study lock as the reaper does.

    Returns the trial as it was read while still running, or None, queuing nothing, when it had
    already finished (its own tell, a reaper).
    """
    coordinator = ctx.coordinator
    with coordinator.lock() as conn:
        st.check_lock(conn)  # still held: a claim never sees the trial failed before its retry is queued
        failed = fail_and_retry(coordinator.storage, ctx.optuna_study, st.trial_id(trial), reason)
    if failed is None:
        return None
    frozen, queued = failed
    log.warning("trial %d failed: %s; %s", trial.number, reason, "queued its retry" if queued else "no retries left")
    return frozen


def _end_run(ctx: WorkerContext, trial: FrozenTrial, reason: str) -> None:
    """End this attempt's MLflow run FAILED; a run id not written by this worker is a retry's inheritance."""
    run_id = trial.user_attrs.get("mlflow_run_id")
    if not run_id or trial.user_attrs.get("worker") != ctx.worker_id:
        return
    try:
        ctx.tracker.set_tags(run_id, {"hpsearch.state": "FAIL", "hpsearch.fail_reason": reason})
        ctx.tracker.end_run(run_id, "FAILED")
    except Exception as exc:  # noqa: BLE001 - bookkeeping only; a retry marks it KILLED when it starts
        log.warning("could not end MLflow run %s of stalled trial %d: %s", run_id, trial.number, exc)


def _exit_tree(code: int) -> None:
    """End this process's descendants, then this process: ``os._exit`` leaves its children running,
    and a DataLoader worker hung in its dataset never looks whether its parent is still there."""
    from search.execution._tree import end_descendants

    with contextlib.suppress(Exception):  # exiting anyway
        end_descendants("the stalled trial")
        _flush()
    os._exit(code)


def _flush() -> None:
    """What is logged so far reaches its file: ``os._exit`` skips every handler's own flush."""
    for sink in [*logging.getLogger().handlers, *log.handlers, sys.stdout, sys.stderr]:
        with contextlib.suppress(Exception):  # exiting anyway
            sink.flush()
