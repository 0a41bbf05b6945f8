"""Worker processes on this machine: how many, on which GPUs, started, followed and waited for."""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from search.coordination import retrying
from search.exceptions import SearchError, TemporaryFailure
from search.execution._early import end_unjoined
from search.execution._machine import (  # noqa: F401  (the rest is re-exported)
    MAX_DEFAULT_CPU_WORKERS,
    default_workers,
    parse_gpus,
    schema_checked_env,
    usable_cores,
    visible_gpus,
    wake_workers,
    worker_command,
    worker_logs,
    worker_threads,
)
from search.execution._restarts import Restarts, describe, is_fault
from search.execution._tree import descendants, end_processes
from search.settings import location_env
from search.tracking import Tracker

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from search.coordination import Coordinator
    from search.settings import Locations

log = logging.getLogger(__name__)


EXIT_TEMPFAIL = 75
"""A worker's exit code when the database stayed unreachable past --db-outage-limit."""


def spawn_workers(loc: Locations, name: str, count: int, gpus: list[str], debug: bool, fraction: float | None = None,
                  ) -> list[subprocess.Popen[bytes]]:  # fmt: skip
    """Start ``count`` local ``search worker`` processes of study ``name``, logging to ``<project>/logs``
    (``search start`` starts them earlier, before the study exists: :func:`spawn_early`)."""
    return [spawn_worker(loc, name, index, count, gpus, debug, fraction) for index in range(count)]


def spawn_worker(loc: Locations, name: str, index: int, count: int, gpus: list[str], debug: bool,
                 fraction: float | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start local worker ``index`` of ``count``, appending to ``<project>/logs/worker-<index>.log``
    (its GPU and the cap on its share of the GPU's memory: :func:`worker_command`)."""
    logs = worker_logs(loc)
    logs.mkdir(parents=True, exist_ok=True)
    cmd, env = worker_command(name, index, count, gpus, debug, fraction)
    with open(logs / f"worker-{index}.log", "ab") as out:
        # This process has opened the study's storage (it found or created the study), so it is
        # checked: the worker need not again.
        env |= location_env(loc) | schema_checked_env(loc.storage_url)
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_for_workers(procs: list[subprocess.Popen[bytes]], follow: Any, restart: Restarts | None = None) -> list[int]:
    """Call ``follow()`` about once a second until every worker has exited; forward Ctrl-C.

    With ``restart`` (:class:`~search.execution._restarts.Restarts`), a worker that exits with a
    code other than 0 is offered to it, once, and replaced by the fresh worker it returns: after
    failing a stalled trial (:data:`EXIT_STALLED`), or dying of a fault while the study is live.
    Once one exits with the study over, those still importing (never joined) are ended, with code 0.
    """
    next_follow, done = 0.0, 0
    spared: set[int] = set()  # ended as not needed (see end_unjoined): they exit as having succeeded
    settled: set[int] = set()  # exited, and not replaced
    try:
        while True:
            # One look at each worker a pass: a worker that exited between a look for a restart and
            # a look for any exit would count as done, and its stalled trial's retry find no worker.
            codes = [p.poll() for p in procs]
            for index, code in enumerate(codes):
                if restart is not None and code not in (0, None) and index not in settled:
                    fresh = restart(index, procs[index])
                    if fresh is None:
                        settled.add(index)
                    else:
                        procs[index], codes[index] = fresh, None
            exited = [code is not None for code in codes]
            if all(exited):
                break
            if exited.count(True) > done:  # a worker found the study over: the idle rest need not poll
                done = exited.count(True)
                wake_workers()
                if any(p.returncode == 0 for p in procs):  # nor need those still importing start
                    spared |= end_unjoined(procs)
            if time.monotonic() >= next_follow:
                follow()
                next_follow = time.monotonic() + 1.0
            time.sleep(0.1)  # the last worker's exit is seen within 0.1 s: the study's end waits on it
    except KeyboardInterrupt:
        stop_workers(procs)
        raise
    follow()
    return [0 if index in spared else p.returncode for index, p in enumerate(procs)]


def stop_workers(procs: list[subprocess.Popen[bytes]], limit: float = 60.0) -> None:
    """Ctrl-C to each worker (it queues its running trial again), a wait of at most ``limit`` s,
    SIGKILL for the rest; then whatever of their process trees is left (DataLoader processes)."""
    tree = descendants()  # read now: a worker's children are no longer found through it once it exits
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.monotonic() + limit
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    end_processes(tree, "the stopped workers")


def check_some_worker_succeeded(codes: list[int], loc: Locations) -> str | None:
    """None when a local worker succeeded (or none ran); the reason, in one line, when all of them
    died of faults (:func:`is_fault`) or were stopped (130, 143, 129): the study may go on elsewhere.

    Raises what the workers said otherwise: bad input (:class:`SearchError`, a study not to wait on
    forever) or, when all of them exited 75, :class:`TemporaryFailure` (retry later: the database, or
    their machine).
    """
    if not codes or any(code == 0 for code in codes):
        return None
    log_file = worker_logs(loc) / "worker-0.log"
    lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()] \
        if log_file.exists() else []  # fmt: skip
    last = f": {lines[-1].strip()}" if lines else ""
    shown = ", ".join(sorted({describe(code) for code in codes}))
    message = f"all {len(codes)} local workers failed ({shown}); {log_file}{last}"
    if set(codes) == {EXIT_TEMPFAIL}:  # the database went away for all of them: retry later
        raise TemporaryFailure(message)
    if all(is_fault(code) or code in _STOPPED or code == EXIT_TEMPFAIL for code in codes):
        return message
    raise SearchError(message.replace(f"({shown})", f"(exit codes {sorted(set(codes))})"))


_STOPPED = frozenset({130, 143, 129})
"""A worker's exit after Ctrl-C, SIGTERM or SIGHUP: its trial is queued again, no fault of the input."""


def report_worker_codes(codes: list[int], loc: Locations) -> None:
    for index, code in enumerate(codes):
        if code not in (0, None):
            log.warning(
                "worker %d exited with code %s; see %s", index, code, loc.project_dir / "logs" / f"worker-{index}.log"
            )


def reaping(coordinator: Coordinator, loc: Locations, follow: Callable[[], None]) -> Callable[[], None]:
    """``follow`` that also reaps dead trials about twice per grace period, as the follower does.

    The MLflow runs of trials reaped here are ended too (the tracker is opened on first need).
    """
    trackers: list[Tracker] = []

    def end_run(trial: FrozenTrial) -> None:
        if not trackers:
            trackers.append(Tracker(loc.tracking()))
        trackers[0].end_dead_run(trial)

    coordinator.on_reaped = end_run
    every = max(1.0, (coordinator.storage.grace_period or 60) / 2)
    state: dict[str, Any] = {"study": None, "next": 0.0}

    def follow_and_reap() -> None:
        if time.monotonic() >= state["next"]:
            state["next"] = time.monotonic() + every
            state["study"] = state["study"] or retrying(coordinator.load, "loading the study")
            coordinator.reap(state["study"])
        follow()

    return follow_and_reap
