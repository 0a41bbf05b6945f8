"""A process's descendants, found while they are still its descendants, and ended so none outlives it.

A process that exits leaves its children to init: once it is gone nobody can tell them from any
other process. So the tree is read first (psutil, which accelerate already needs) and what is
still alive of it is ended afterwards; psutil checks each process's start time, so a pid reused
meanwhile is not touched.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def descendants(pid: int | None = None) -> list[Any]:
    """The living descendants of ``pid`` (this process if None), as ``psutil.Process`` objects."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def end_processes(procs: list[Any], what: str) -> int:
    """SIGKILL those of ``procs`` still alive (a hung DataLoader worker ignores anything milder);
    how many there were."""
    import psutil

    alive = [p for p in procs if _alive(p)]
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    if alive:
        log.warning("ended %d process(es) left behind by %s: %s", len(alive), what,
                    ", ".join(str(p.pid) for p in alive))  # fmt: skip
    psutil.wait_procs(alive, timeout=5)
    return len(alive)


def end_descendants(what: str) -> int:
    """SIGKILL every descendant of this process (a stalled trial's DataLoader workers, before it exits)."""
    return end_processes(descendants(), what)


def _alive(proc: Any) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
