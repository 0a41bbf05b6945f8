"""Worker processes on this machine: how many, on which GPUs, started, followed and waited for."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.coordination import retrying
from search.exceptions import DatabaseUnavailableError, SearchError
from search.execution._early import _EARLY_LOGS, ENV_EARLY, ENV_EARLY_STUDY
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


MAX_DEFAULT_CPU_WORKERS = 16
"""The most CPU workers ``search start`` runs unless told (each holds up to 5 database connections)."""


def usable_cores() -> int:
    """Cores this process may run on (a Slurm or taskset binding, not the node's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_workers(trials: int | None = None) -> int:
    """One worker per GPU; on CPU, one single-threaded worker per usable core (at most
    :data:`MAX_DEFAULT_CPU_WORKERS`, and no more than ``trials``).

    Trials are independent, so on CPU they scale by processes far better than by threads: the
    small models trained on CPU leave a second intra-op thread mostly waiting
    (``benchmarks/bench_workers.py``).
    """
    gpus = visible_gpus()
    if gpus:
        return len(gpus)
    return max(1, min(usable_cores(), MAX_DEFAULT_CPU_WORKERS, trials or MAX_DEFAULT_CPU_WORKERS))


def worker_threads(count: int, gpus: list[str]) -> str:
    """Intra-op threads of each of ``count`` local workers: the usable cores shared out among them
    (4 beside a GPU), unless the user set ``OMP_NUM_THREADS``."""
    return os.environ.get("OMP_NUM_THREADS") or str(4 if gpus else max(1, usable_cores() // max(1, count)))


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries for its workers.

    A scheduler (Slurm, Kubernetes) or the user narrows the set with ``CUDA_VISIBLE_DEVICES``;
    when it is set it is the whole set (``nvidia-smi`` would list every GPU of the node). Its
    entries (indices, ``GPU-``/``MIG-`` UUIDs) end, as CUDA reads them, at the first invalid one.
    """
    assigned = os.environ.get("CUDA_VISIBLE_DEVICES")
    if assigned is not None:
        return _device_list(assigned)
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def _device_list(value: str) -> list[str]:
    devices: list[str] = []
    for entry in (e.strip() for e in value.split(",")):
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))) or entry in devices:
            break  # "", "-1", Slurm's "NoDevFiles": no (more) GPUs
        devices.append(entry)
    return devices


def spawn_workers(loc: Locations, name: str | None, count: int, gpus: list[str], debug: bool, early: bool = False,
                  study: tuple[str, dict[str, Any]] | None = None) -> list[subprocess.Popen[bytes]]:  # fmt: skip
    """Start ``count`` local ``search worker`` processes, logging to ``<project>/logs``.

    ``early`` workers start while the command's input is checked and the study created, and pay
    their start-up (importing torch, MLflow, Accelerate; loading ``study``'s module and data, a
    ``(ref, options)`` pair: seconds) meanwhile; :func:`release_workers` lets them join or sends
    them away.
    """
    return [spawn_worker(loc, name, index, count, gpus, debug, early, study) for index in range(count)]


def spawn_worker(loc: Locations, name: str | None, index: int, count: int, gpus: list[str], debug: bool,
                 early: bool = False, study: tuple[str, dict[str, Any]] | None = None,
                 ) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start local worker ``index`` of ``count``, appending to ``<project>/logs/worker-<index>.log``;
    an ``early`` one may start without the study's ``name``, which it is told when released."""
    logs = loc.project_dir / "logs"
    if not early:
        logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **location_env(loc), "OMP_NUM_THREADS": worker_threads(count, gpus)}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
    cmd = [sys.executable, "-m", "search", *(["--debug"] if debug else []), "worker",
           *(["--name", name] if name else []), "--worker-index", str(index)]  # fmt: skip
    log_path = logs / f"worker-{index}.log"
    if early:
        fd, temp = tempfile.mkstemp(prefix=f"hpsearch-worker-{index}-", suffix=".log")
        os.close(fd)
        env[ENV_EARLY] = temp
        if study is not None:
            env[ENV_EARLY_STUDY] = json.dumps(study)
        log_path = Path(temp)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if early else None)  # fmt: skip
    if early:
        _EARLY_LOGS[proc.pid] = (log_path, logs / f"worker-{index}.log")
    return proc


def wait_for_workers(procs: list[subprocess.Popen[bytes]], follow: Any,
                     restart: Callable[[int], subprocess.Popen[bytes]] | None = None) -> list[int]:  # fmt: skip
    """Call ``follow()`` about once a second until every worker has exited; forward Ctrl-C.

    With ``restart``, a worker that exits after failing a stalled trial (:data:`EXIT_STALLED`) is
    replaced by ``restart(index)``, so the trial's retry and the rest of the budget find a worker.
    Each such exit costs one attempt of one trial, so the restarts end with the budget.
    """
    next_follow = 0.0
    try:
        while True:
            if restart is not None:
                for index, proc in enumerate(procs):
                    if proc.poll() == EXIT_STALLED:
                        log.warning("worker %d ended after failing a stalled trial (exit code %d); starting a fresh "
                                    "one", index, EXIT_STALLED)  # fmt: skip
                        procs[index] = restart(index)
            if all(p.poll() is not None for p in procs):
                break
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
    return [p.returncode for p in procs]


def parse_gpus(value: str) -> list[str]:
    """``all`` or distinct GPU indices, as ``CUDA_VISIBLE_DEVICES`` entries for the workers.

    The indices count the GPUs this process may use, as CUDA does: with ``CUDA_VISIBLE_DEVICES=2,5``
    ``--gpus 1`` is GPU 5, and no index reaches a GPU outside the set.
    """
    present = visible_gpus()
    if value.strip().lower() == "all":
        if not present:
            raise SearchError(f"--gpus all: no NVIDIA GPU is visible to this process{_assigned()}")
        return present
    parts = [p.strip() for p in value.split(",")]
    if not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise SearchError(f"invalid --gpus value {value!r}; expected all or a comma-separated list like 0,1")
    missing = [p for p in parts if int(p) >= len(present)]
    if missing:
        have = ", ".join(str(i) for i in range(len(present))) if present else "none"
        raise SearchError(f"--gpus {value}: no GPU {', '.join(missing)} here (GPUs here: {have}){_assigned()}")
    return [present[int(p)] for p in parts]


def _assigned() -> str:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "" if value is None else f" (CUDA_VISIBLE_DEVICES={value})"


def worker_logs(loc: Locations) -> Path:
    return loc.project_dir / "logs"


def check_some_worker_succeeded(codes: list[int], loc: Locations) -> None:
    """All local workers failing is an error to report, not a study to wait on forever."""
    if not codes or any(code == 0 for code in codes):
        return
    log_file = worker_logs(loc) / "worker-0.log"
    lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()] \
        if log_file.exists() else []  # fmt: skip
    last = f": {lines[-1].strip()}" if lines else ""
    message = f"all {len(codes)} local workers failed (exit codes {sorted(set(codes))}); {log_file}{last}"
    if set(codes) == {EXIT_TEMPFAIL}:  # the database went away for all of them: retry later
        raise DatabaseUnavailableError(message)
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
