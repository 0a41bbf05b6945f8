"""Failures of the worker's machine, not of its trial: a full or read-only disk, a path too long.

Failing the trial for them would spend its retries, and the study's budget, on a machine that
fails every trial alike: the worker instead requeues its trial (a retry that does not count
against ``--max-retries``) and stops with exit code 75, naming the cause in one line.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.ENAMETOOLONG: "file name too long",
}
# torch.save reports a failed write in its own words; the OSError, if any, is only the context.
_TORCH_WRITE = ("unexpected pos", "PytorchStreamWriter failed writing file", "file write failed")
LOW_SPACE_BYTES = 1 << 20


def environment_failure(exc: BaseException, checkpoint_dir: Path) -> str | None:
    """What of this machine ``exc`` says failed, in a few words and the path, or None for a trial's own error.

    The whole chain is looked at: torch wraps a full disk as ``RuntimeError: ... unexpected pos``
    with the ``OSError`` as its context, or without it; then the free space of ``checkpoint_dir``
    decides what to name.
    """
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for inner in chain:
        if isinstance(inner, OSError) and inner.errno in _ERRNOS:
            return f"{_ERRNOS[inner.errno]} ({inner.filename or checkpoint_dir})"
    if any(isinstance(inner, RuntimeError) and any(w in str(inner) for w in _TORCH_WRITE) for inner in chain):
        free = free_bytes(checkpoint_dir)
        if free is not None and free < LOW_SPACE_BYTES:
            return f"no space left on device ({checkpoint_dir}: {free} bytes free)"
        return f"could not write a checkpoint in {checkpoint_dir}: {str(exc).splitlines()[0][:200]}"
    return None


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged process may still write on ``path``'s filesystem (its nearest existing parent's)."""
    for candidate in (path, *path.parents):
        try:
            stat = os.statvfs(candidate)
        except OSError:
            continue
        return stat.f_bavail * stat.f_frsize
    return None
