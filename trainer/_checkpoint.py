"""Full training state on disk: written atomically every epoch, loaded with ``weights_only=True``.

A checkpoint is a dict of tensors and plain Python values only (no pickled objects), so loading one
never runs code from the file. Layout of ``checkpoint_dir``::

    epoch-0003.pt  epoch-0004.pt   the last ``keep_last`` epochs
    best.pt                        a hard link to (or copy of) the epoch with the lowest val_loss
"""

from __future__ import annotations

import os
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from trainer._errors import CheckpointError

BEST_NAME = "best.pt"
RESUME_KEYS = ("model", "optimizer", "scheduler", "rng", "epoch", "global_step", "lr", "best_epoch", "best_val_loss",
               "config")  # fmt: skip
"""What a resume reads from an epoch checkpoint (``infra``, ``world_size`` and ``scaler`` may be absent)."""
_EPOCH_FILE = re.compile(r"epoch-(\d+)\.pt")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint written by ``fit`` onto the CPU.

    Raises:
        CheckpointError: the file is missing, truncated, corrupt or not a trainer checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load fails in many ways on a damaged file (EOF, zip, unpickling)
        raise CheckpointError(f"{path} is truncated or corrupt: {exc}") from exc
    if not isinstance(state, dict) or "model" not in state or "epoch" not in state:
        raise CheckpointError(f"{path} is not a trainer checkpoint")
    return state


def load_model_weights(model: nn.Module, path: str | Path) -> nn.Module:
    """Load the model weights of checkpoint ``path`` into ``model`` (in place) and return it."""
    state = load_checkpoint(path)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise CheckpointError(f"{path} does not match the model: {exc}") from exc
    return model


class Checkpointer:
    """Writes, rotates and finds the checkpoints of one run. Only the main process writes."""

    def __init__(self, directory: Path, keep_last: int, *, writer: bool) -> None:
        self.directory, self.keep_last, self.writer = directory, keep_last, writer
        if writer:
            directory.mkdir(parents=True, exist_ok=True)

    @property
    def best_path(self) -> Path | None:
        path = self.directory / BEST_NAME
        return path if path.is_file() else None

    def epoch_files(self) -> list[Path]:
        """Epoch checkpoints in the directory, oldest first."""
        if not self.directory.is_dir():
            return []
        found = [path for path in self.directory.iterdir() if _EPOCH_FILE.fullmatch(path.name)]
        return sorted(found, key=_epoch_of)

    def load_latest(self) -> dict[str, Any] | None:
        """The newest checkpoint that loads and has everything a resume reads; damaged ones (truncated,
        unreadable, or missing keys: written by something else, or by a crash we did not foresee) are
        skipped with a warning, and when none is left the run starts over, with a warning too."""
        files = self.epoch_files()
        for path in reversed(files):
            try:
                state = load_checkpoint(path)
                missing = [key for key in RESUME_KEYS if key not in state]
                if missing:
                    raise CheckpointError(f"{path} lacks {', '.join(missing)}")
                return state
            except CheckpointError as exc:
                warnings.warn(f"skipping checkpoint: {exc}", RuntimeWarning, stacklevel=4)  # caller of fit
            except OSError as exc:  # unreadable (permissions, an I/O error): as damaged as a truncated file
                warnings.warn(f"skipping checkpoint: cannot read {path}: {exc}", RuntimeWarning, stacklevel=4)
        if files:
            warnings.warn(f"no usable checkpoint in {self.directory}; starting over", RuntimeWarning, stacklevel=4)
        return None

    def discard_after(self, epoch: int) -> None:
        """Remove files a run starting after ``epoch`` would otherwise mix with its own."""
        if not self.writer:
            return
        for path in self.epoch_files():
            if _epoch_of(path) > epoch:
                path.unlink(missing_ok=True)
        if epoch == 0:
            (self.directory / BEST_NAME).unlink(missing_ok=True)

    def save(self, state: dict[str, Any], epoch: int, *, is_best: bool) -> None:
        if not self.writer:
            return
        path = self.directory / f"epoch-{epoch:04d}.pt"
        _atomic_save(state, path)
        if is_best:
            _atomic_link(path, self.directory / BEST_NAME)
        for old in self.epoch_files()[: -self.keep_last]:
            old.unlink(missing_ok=True)


def _epoch_of(path: Path) -> int:
    return int(path.stem.removeprefix("epoch-"))


def _atomic_save(obj: dict[str, Any], path: Path) -> None:
    # A crash mid-write leaves a stray temp file, never a truncated checkpoint under the real name.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _atomic_link(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)  # no second write of the whole state where the filesystem allows it
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
    _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories; the rename is still atomic
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def capture_rng() -> dict[str, Any]:
    """Every RNG state that training consumes, as tensors and plain values."""
    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    rng: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": [version, list(words), gauss],
        # numpy arrays are not allowed under weights_only=True; an int64 tensor is.
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_rng(rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    version, words, gauss = rng["python"]
    random.setstate((version, tuple(words), gauss))
    kind, keys, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
