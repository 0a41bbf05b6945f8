"""This machine's share for workers: how many, with how many threads each, on which GPUs.

Standard library only: ``search start`` decides this and starts its workers before it imports
anything heavy (SQLAlchemy, the study's modules), so that their own imports begin at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from search.exceptions import SearchError

if TYPE_CHECKING:
    from search.settings import Locations

ENV_WAKE = "HPSEARCH_WAKE_FILE"
"""For a local worker: a file its starter grows by a byte when one of its workers has exited having
found nothing left to claim; idle workers re-check the study at once instead of at their next poll
(:func:`idle_wait`), so the study's end does not wait up to a poll for them."""
_WAKE_CHECK_S = 0.05

ENV_SCHEMA_CHECKED = "HPSEARCH_SCHEMA_CHECKED"
"""For a worker a ``search`` process starts once it has opened the study's storage in full (made or
checked Optuna's tables): a digest of that storage's URL. The worker opens the same storage without
checking its schema again (:func:`schema_checked`); a worker started by hand, by Slurm or on
another node (perhaps with another Optuna) checks it."""

MAX_DEFAULT_CPU_WORKERS = 16
"""The most CPU workers ``search start`` runs unless told (each holds up to 2 connections to the
Optuna database, and MLflow's own when its store is a database)."""

ENV_GPU_MEMORY_FRACTION = "HPSEARCH_GPU_MEMORY_FRACTION"
"""For a local worker that shares its GPU with others of its starter: the fraction of the GPU's
memory its PyTorch allocations may take (``torch.cuda.set_per_process_memory_fraction``, see
``search.execution._worker.cap_gpu_memory``); a trial that needs more fails out of memory."""

SHARED_GPU_MEMORY = 0.9
"""Of a GPU that ``n`` local workers share, each may allocate ``0.9 / n`` unless told
(``--gpu-memory-fraction``). The cap counts what PyTorch's allocator holds, not each process's CUDA
context (a few hundred MB): the tenth left over is for those."""


def usable_cores() -> int:
    """Cores this process may run on (a Slurm or taskset binding, not the node's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_workers(trials: int | None = None, per_gpu: int = 1) -> int:
    """``per_gpu`` workers per GPU (``--workers-per-gpu``); on CPU, one single-threaded worker per
    usable core (at most :data:`MAX_DEFAULT_CPU_WORKERS`, and no more than ``trials``).

    Trials are independent, so on CPU they scale by processes far better than by threads: the
    small models trained on CPU leave a second intra-op thread mostly waiting
    (``benchmarks/bench_workers.py``).
    """
    gpus = visible_gpus()
    if gpus:
        return len(gpus) * per_gpu
    return max(1, min(usable_cores(), MAX_DEFAULT_CPU_WORKERS, trials or MAX_DEFAULT_CPU_WORKERS))


def worker_threads(count: int, gpus: list[str]) -> str:
    """Intra-op threads of each of ``count`` local workers: the usable cores shared out among them
    (at most 4 beside a GPU, whose worker computes little on the CPU), unless the user set
    ``OMP_NUM_THREADS``."""
    share = max(1, usable_cores() // max(1, count))
    return os.environ.get("OMP_NUM_THREADS") or str(min(4, share) if gpus else share)


def check_sharing(per_gpu: int, memory_fraction: float | None) -> None:
    """``--workers-per-gpu`` and ``--gpu-memory-fraction``, before anything starts."""
    if per_gpu < 1:
        raise SearchError(f"--workers-per-gpu must be >= 1, got {per_gpu}")
    if memory_fraction is not None and not 0 < memory_fraction <= 1:
        raise SearchError(f"--gpu-memory-fraction must be > 0 and <= 1 (1: no cap), got {memory_fraction:g}")


def check_gpus_to_share(gpus: list[str], per_gpu: int, memory_fraction: float | None) -> None:
    """Refuse GPU sharing flags where the workers have no GPU to share (they run on CPU)."""
    if gpus:
        return
    flag = f"--workers-per-gpu {per_gpu}" if per_gpu > 1 else "--gpu-memory-fraction" if memory_fraction else ""
    if flag:
        raise SearchError(f"{flag} needs a GPU, and none is visible to this process{_assigned()}; "
                          "on CPU, --workers sets how many workers run")  # fmt: skip


def gpu_of(index: int, gpus: list[str]) -> str:
    """Local worker ``index``'s GPU: round-robin, so that the workers started first (one per usable
    core, the rest later: ``start_at_once``) are on different GPUs, and a count that is not a
    multiple of the GPUs leaves them at most one worker apart."""
    return gpus[index % len(gpus)]


def memory_fraction(index: int, count: int, gpus: list[str], fraction: float | None = None) -> float | None:
    """The cap on local worker ``index``'s (of ``count``) share of its GPU's memory: ``fraction``
    when given (1: none), else :data:`SHARED_GPU_MEMORY` over the workers on its GPU; None alone."""
    if not gpus:
        return None
    if fraction is not None:
        return None if fraction >= 1 else fraction
    sharing = len(range(index % len(gpus), max(count, index + 1), len(gpus)))
    return SHARED_GPU_MEMORY / sharing if sharing > 1 else None


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
    """Where local workers append their output: ``<project>/logs/worker-<index>.log``."""
    return loc.project_dir / "logs"


def worker_command(name: str | None, index: int, count: int, gpus: list[str], debug: bool,
                   fraction: float | None = None) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The command and environment of local worker ``index`` of ``count`` (of study ``name``, or
    of the study it is told later), its threads, GPU and cap on its memory (``fraction``, see
    :func:`memory_fraction`); the caller adds where the study lives."""
    env = {**os.environ, "OMP_NUM_THREADS": worker_threads(count, gpus), ENV_WAKE: str(_wake_file())}
    env.pop(ENV_GPU_MEMORY_FRACTION, None)  # a worker's own starter's cap is not this one's
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpu_of(index, gpus)
        cap = memory_fraction(index, count, gpus, fraction)
        if cap is not None:
            env[ENV_GPU_MEMORY_FRACTION] = f"{cap:.4g}"
    cmd = [sys.executable, "-m", "search", *(["--debug"] if debug else []), "worker",
           *(["--name", name] if name else []), "--worker-index", str(index)]  # fmt: skip
    return cmd, env


_WAKE: list[Path] = []


def _wake_file() -> Path:
    """This process's wake file for the workers it starts (made on first use, removed at its exit)."""
    if not _WAKE:
        import atexit
        import tempfile

        fd, name = tempfile.mkstemp(prefix="hpsearch-wake-")
        os.close(fd)
        _WAKE.append(Path(name))
        atexit.register(lambda: _WAKE[0].unlink(missing_ok=True))
    return _WAKE[0]


def wake_workers() -> None:
    """Wake the idle workers this process started (see :data:`ENV_WAKE`)."""
    if _WAKE:
        try:
            with _WAKE[0].open("ab") as wake:
                wake.write(b".")
        except OSError:  # they poll anyway
            pass


def idle_wait(seconds: float) -> None:
    """Sleep ``seconds``, less if the wake file of this worker's starter grows meanwhile."""
    import time

    path = os.environ.get(ENV_WAKE)
    if not path:
        time.sleep(seconds)
        return

    def size() -> int:
        try:
            return os.stat(path).st_size
        except OSError:
            return -1

    before, deadline = size(), time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(_WAKE_CHECK_S, left))
        if size() != before:
            return


def schema_checked_env(url: str) -> dict[str, str]:
    """The environment that tells a worker started now that the storage at ``url`` was opened in full
    by its starter (see :data:`ENV_SCHEMA_CHECKED`)."""
    return {ENV_SCHEMA_CHECKED: _url_digest(url)}


def schema_checked(url: str) -> bool:
    """Whether this process's starter opened the storage at ``url`` in full before starting it."""
    return os.environ.get(ENV_SCHEMA_CHECKED) == _url_digest(url)


def _url_digest(url: str) -> str:
    import hashlib

    return hashlib.sha256(url.encode()).hexdigest()[:16]
