"""The project directory that holds embedded stores (``./.search`` by default)."""

from __future__ import annotations

import os
from pathlib import Path

from storage._errors import StorageError

DEFAULT_DIRNAME = ".search"


def ensure_project_dir(path: Path) -> Path:
    """Create ``path`` if needed and prove it is writable; one clear line when it is not."""
    path = path.expanduser().resolve()
    check_writable(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise StorageError(f"project directory {path} is not writable: {exc.strerror}") from None
    return path


def check_writable(path: Path) -> None:
    """Like :func:`ensure_project_dir` but creates nothing."""
    path = path.expanduser().resolve()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise StorageError(f"project directory {path} is not writable")
