"""Study names, and every path on disk that is derived from one.

A study's name (``--name``, or a study's own ``name``) becomes a directory under the checkpoint
root and the TensorBoard root, part of file names (exports, reports, Slurm scripts, logs), an
MLflow experiment and a registered model. So it is one path component of a conservative character
set, checked before anything is created, and every directory built from it is checked again to lie
inside its root once resolved (a symbolic link inside the root that points out of it is caught there).
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Collection
from pathlib import Path

from search.exceptions import SearchError

MAX_NAME_LENGTH = 64
"""Far below a file name's 255 bytes, with room for the suffixes file names add (``-v12-export.onnx``)."""
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME_LENGTH - 1}}}")
NAME_RULE = f"1 to {MAX_NAME_LENGTH} letters, digits, '.', '_' or '-', starting with a letter or digit"
_TRIAL_DIR = re.compile(r"trial-[0-9]+")


def check_study_name(name: object, source: str = "--name") -> str:
    """``name`` if it is a valid study name, else one line naming ``source`` and the rule."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return name
    shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
    raise SearchError(f"{source} {shown} is not a valid study name: use {NAME_RULE}")


def study_dir(root: Path, name: str) -> Path:
    """``root/name``, for a valid ``name`` only, checked to resolve to a directory inside ``root``."""
    check_study_name(name, "study name")
    base = Path(root).resolve()
    path = (base / name).resolve()
    if path.parent != base:
        raise SearchError(f"study directory {path} is not inside {base} (a symbolic link?); refusing to use it")
    return path


def remove_study_dir(root: Path, name: str, trials: Collection[int] | None = None) -> list[Path]:
    """Remove what this project writes in ``study_dir(root, name)``: its ``trial-<n>`` folders (only
    those of ``trials``, the study's trial numbers, when given), then the folder itself if nothing
    else is left in it. Anything else found there is kept, and returned.

    Never follows a symbolic link out of the folder: a ``trial-<n>`` that is a link is unlinked, not
    descended into.
    """
    folder = study_dir(root, name)
    if not folder.is_dir():
        return []
    kept = []
    for entry in folder.iterdir():
        ours = _TRIAL_DIR.fullmatch(entry.name) is not None
        if not ours or (trials is not None and int(entry.name.removeprefix("trial-")) not in trials):
            kept.append(entry)
        elif entry.is_symlink() or not entry.is_dir():
            entry.unlink(missing_ok=True)
        else:
            shutil.rmtree(entry, ignore_errors=True)
    if not kept:
        with contextlib.suppress(OSError):  # a worker wrote a new trial's folder meanwhile
            folder.rmdir()
    return kept
