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
from search.execution._watchdog import EXIT_STALLED
from search.settings import location_env
from search.tracking import Tracker

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from search.coordination import Coordinator
    from search.settings import Locations

log = logging.getLogger(__name__)


EXIT_TEMPFAIL = 75
"""A worker's exit code when the database stayed unreachable past --db-outage-limit."""


def spawn_workers(loc: Locations, name: str, count: int, gpus: list[str], debug: bool) -> list[subprocess.Popen[bytes]]:
    """Start ``count`` local ``search worker`` processes of study ``name``, logging to ``<project>/logs``
    (``search start`` starts them earlier, before the study exists: :func:`spawn_early`)."""
    return [spawn_worker(loc, name, index, count, gpus, debug) for index in range(count)]


def spawn_worker(loc: Locations, name: str, index: int, count: int, gpus: list[str], debug: bool,
                 ) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start local worker ``index`` of ``count``, appending to ``<project>/logs/worker-<index>.log``."""
    logs = worker_logs(loc)
    logs.mkdir(parents=True, exist_ok=True)
    cmd, env = worker_command(name, index, count, gpus, debug)
    with open(logs / f"worker-{index}.log", "ab") as out:
        # This process has opened the study's storage (it found or created the study), so it is
        # checked: the worker need not again.
        env |= location_env(loc) | schema_checked_env(loc.storage_url)
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_for_workers(procs: list[subprocess.Popen[bytes]], follow: Any,
                     restart: Callable[[int], subprocess.Popen[bytes]] | None = None) -> list[int]:  # fmt: skip
    """Call ``follow()`` about once a second until every worker has exited; forward Ctrl-C.

    With ``restart``, a worker that exits after failing a stalled trial (:data:`EXIT_STALLED`) is
    replaced by ``restart(index)``, so the trial's retry and the rest of the budget find a worker.
    Each such exit costs one attempt of one trial, so the restarts end with the budget.
    Once one exits with the study over, those still importing (never joined) are ended, with code 0.
    """
    next_follow, done = 0.0, 0
    spared: set[int] = set()  # ended as not needed (see end_unjoined): they exit as having succeeded
    try:
        while True:
            # One look at each worker a pass: a worker that exited between a look for a stalled exit
            # and a look for any exit would count as done, and its stalled trial's retry find no worker.
            codes = [p.poll() for p in procs]
            if restart is not None:
                for index, code in enumerate(codes):
                    if code == EXIT_STALLED:
                        log.warning("worker %d ended after failing a stalled trial (exit code %d); starting a fresh "
                                    "one", index, EXIT_STALLED)  # fmt: skip
                        procs[index], codes[index] = restart(index), None
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
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    follow()
    return [0 if index in spared else p.returncode for index, p in enumerate(procs)]


def check_some_worker_succeeded(codes: list[int], loc: Locations) -> None:
    """All local workers failing is an error to report, not a study to wait on forever."""
    if not codes or any(code == 0 for code in codes):
        return
    log_file = worker_logs(loc) / "worker-0.log"
    lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()] \
        if log_file.exists() else []  # fmt: skip
    last = f": {lines[-1].strip()}" if lines else ""
    message = f"all {len(codes)} local workers failed (exit codes {sorted(set(codes))}); {log_file}{last}"
    if set(codes) == {EXIT_TEMPFAIL}:  # the database went away, or the machine failed them all: retry later
        raise TemporaryFailure(message)
    raise SearchError(message)


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
