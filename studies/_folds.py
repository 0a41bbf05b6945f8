"""K-fold cross-validation splits of a study's training rows (the ``folds`` study option).

The test split is drawn first, exactly as for one split (``_tabular.split_indices``), so the same
seed holds out the same test rows whatever ``folds`` is. The rest (one split's train and
validation rows together) is dealt into K stratified folds: each class's rows, shuffled from the
seed, go round the folds in turn, so every fold gets ``n // K`` or ``n // K + 1`` rows of each class.
Fold k trains on the other K-1 folds and validates on fold k, with the preprocessing fitted on its
own training rows; the final model trains on all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from studies._base import Fold
from studies._errors import DataError
from trainer import TensorData

MAX_FOLDS = 20
"""More folds than this is leave-nearly-one-out: each trial would train that many models."""


def check_folds(folds: int) -> int:
    """The ``folds`` study option, checked: 1 (one split) or 2..:data:`MAX_FOLDS`."""
    if not 1 <= folds <= MAX_FOLDS:
        raise ValueError(f"option folds must be 1 (one validation split) or 2..{MAX_FOLDS}, got {folds}")
    return folds


def fold_indices(rows: np.ndarray, y: np.ndarray, class_names: Sequence[str], folds: int, seed: int
                 ) -> list[np.ndarray]:  # fmt: skip
    """``rows`` (indices into ``y``) dealt into ``folds`` disjoint stratified folds, each sorted.

    Raises:
        DataError: A class has fewer rows than folds (some fold would validate without it).
    """
    labels = y[rows]
    counts = np.bincount(labels, minlength=len(class_names))
    small = [f"{class_names[i]!r} ({n} rows)" for i, n in enumerate(counts) if n < folds]
    if small:
        raise DataError(f"folds={folds}: too few rows outside the test split in class {', '.join(small)}; "
                        f"each class needs at least {folds}")  # fmt: skip
    # Its own stream: the folds of a seed do not move the test split, nor depend on other draws.
    rng = np.random.default_rng([seed, folds])
    parts: list[list[np.ndarray]] = [[] for _ in range(folds)]
    start = 0
    for label in range(len(class_names)):
        members = rng.permutation(rows[labels == label])
        # Each class starts where the last one stopped, so no fold gets every class's extra row.
        for offset in range(folds):
            parts[(start + offset) % folds].append(members[offset::folds])
        start = (start + len(members)) % folds
    return [np.sort(np.concatenate(part)) for part in parts]


def make_folds(x: np.ndarray, y: np.ndarray, parts: list[np.ndarray],
               fit_preprocess: Callable[[np.ndarray], nn.Module]) -> tuple[Fold, ...]:  # fmt: skip
    """Fold k: the other parts' rows to train on and part k's to validate on, both preprocessed by
    a fit on its training rows only (no statistic of the rows it validates on leaks in)."""
    made = []
    for k, val_idx in enumerate(parts):
        train_idx = np.sort(np.concatenate([p for j, p in enumerate(parts) if j != k]))
        preprocess = fit_preprocess(x[train_idx])
        made.append(Fold(tensors(x, y, train_idx, preprocess), tensors(x, y, val_idx, preprocess)))
    return tuple(made)


def tensors(x: np.ndarray, y: np.ndarray, indices: np.ndarray, preprocess: nn.Module) -> TensorData:
    """Rows ``indices`` of ``x`` preprocessed (once, here), with their labels, for the trainer."""
    with torch.no_grad():
        inputs = preprocess(torch.from_numpy(x[indices]))
    return TensorData(inputs.contiguous(), torch.from_numpy(y[indices]))
