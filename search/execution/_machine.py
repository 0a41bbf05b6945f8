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
                   ) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The command and environment of local worker ``index`` of ``count`` (of study ``name``, or
    of the study it is told later), its threads and GPU set; the caller adds where the study lives."""
    env = {**os.environ, "OMP_NUM_THREADS": worker_threads(count, gpus), ENV_WAKE: str(_wake_file())}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
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
