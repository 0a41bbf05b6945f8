"""Tabular classification data shared by studies: sources, a fixed split and standardization.

Every source yields a :class:`Table` of raw rows. :func:`tabular_study_data` splits it once
(stratified, from a seed), fits :class:`Standardize` on the training split only and returns a
:class:`~studies.StudyData` whose splits hold standardized features. The test split is for the
final model only; nothing in a search reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from studies._base import StudyData
from studies._errors import DataError
from studies._folds import check_folds, fold_indices, make_folds, tensors
from trainer import Classification

SPLIT_FRACTIONS = (0.70, 0.15, 0.15)
"""Train / validation / test fractions of every class."""
MIN_CLASS_ROWS = 3
"""Fewest rows a class needs: one for each split."""
_READERS = {".csv": "read_csv", ".parquet": "read_parquet", ".pq": "read_parquet"}
"""pandas' reader of each file type (pandas is imported for files only: a quarter second of start-up)."""


@dataclass(frozen=True)
class Table:
    """Raw rows of a classification problem."""

    x: np.ndarray
    """Features, float32, shape ``(rows, features)``."""
    y: np.ndarray
    """Class indices, int64, shape ``(rows,)``."""
    class_names: list[str]
    feature_names: list[str]
    source: str
    """Where the rows came from (``digits``, ``synthetic``, a file path)."""


class Standardize(nn.Module):
    """``(x - mean) / std`` with statistics fitted on the training split, stored as buffers."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())

    @classmethod
    def fit(cls, x: np.ndarray) -> Standardize:
        """Fit on raw training rows; constant features keep std 1 instead of dividing by zero."""
        mean = torch.from_numpy(x.mean(axis=0, dtype=np.float64)).float()
        std = torch.from_numpy(x.std(axis=0, dtype=np.float64)).float()
        return cls(mean, torch.where(std > 1e-8, std, torch.ones_like(std)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


def digits_table() -> Table:
    """scikit-learn's 8x8 handwritten digits: 1797 rows, 64 features, 10 classes.

    Read from scikit-learn's own data file, as ``load_digits`` reads it, without importing
    ``sklearn.datasets`` (about 1 s of every worker's and every ``search start``'s start-up).
    """
    path = _sklearn_data_file("digits.csv.gz")
    if path is None:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        x, y = bunch.data, bunch.target
    else:
        data = np.loadtxt(path, delimiter=",")
        x, y = data[:, :-1], data[:, -1]
    return Table(
        x=x.astype(np.float32),
        y=y.astype(np.int64),
        class_names=[str(i) for i in range(10)],
        feature_names=[f"pixel_{row}_{col}" for row in range(8) for col in range(8)],
        source="digits",
    )


def _sklearn_data_file(name: str) -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / name
    return path if path.is_file() else None


def synthetic_table(rows: int, features: int, classes: int, seed: int = 0) -> Table:
    """Gaussian blobs around random class centroids, learnable but not linearly trivial.

    Half of the features carry class signal and the rest are noise; every feature then gets its
    own scale and offset, so standardization matters as it does for real data.
    """
    rng = np.random.default_rng(seed)
    informative = max(1, features // 2)
    centroids = np.zeros((classes, features))
    centroids[:, :informative] = rng.normal(0.0, 1.0, size=(classes, informative))
    y = np.arange(rows) % classes  # balanced classes
    rng.shuffle(y)
    x = centroids[y] + rng.normal(0.0, 1.0, size=(rows, features))
    x = x * rng.uniform(0.1, 10.0, size=features) + rng.uniform(-5.0, 5.0, size=features)
    return Table(
        x=x.astype(np.float32),
        y=y.astype(np.int64),
        class_names=[f"class_{i}" for i in range(classes)],
        feature_names=[f"x{i}" for i in range(features)],
        source="synthetic",
    )


def file_table(path: str | Path, target: str) -> Table:
    """Read a CSV or Parquet file; ``target`` names the label column, every other column is a feature.

    Raises:
        DataError: The file is missing, empty or unsupported, ``target`` is absent, or features
            are non-numeric or missing.
    """
    import pandas as pd

    path = Path(path)
    frame = _read_frame(path)
    if target not in frame.columns:
        columns = ", ".join(map(str, frame.columns))
        raise DataError(f"{path}: target column {target!r} not found; columns are: {columns}")
    features = frame.drop(columns=[target])
    if features.shape[1] == 0:
        raise DataError(f"{path}: no feature columns besides target {target!r}")
    non_numeric = [str(c) for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if non_numeric:
        raise DataError(f"{path}: non-numeric feature columns: {', '.join(non_numeric)}")
    missing = [str(c) for c in features.columns if features[c].isna().any()]
    if frame[target].isna().any():
        missing.append(f"{target} (target)")
    if missing:
        raise DataError(f"{path}: missing values in columns: {', '.join(missing)}")
    codes, names = pd.factorize(frame[target], sort=True)
    return Table(
        x=features.to_numpy(dtype=np.float32),
        y=codes.astype(np.int64),
        class_names=[str(name) for name in names],
        feature_names=[str(c) for c in features.columns],
        source=str(path),
    )


def split_indices(y: np.ndarray, class_names: list[str], seed: int) -> tuple[np.ndarray, ...]:
    """Stratified train/val/test row indices from ``seed``; each class appears in every split.

    Raises:
        DataError: A class has fewer than :data:`MIN_CLASS_ROWS` rows.
    """
    counts = np.bincount(y, minlength=len(class_names))
    small = [f"{class_names[i]!r} ({n} rows)" for i, n in enumerate(counts) if n < MIN_CLASS_ROWS]
    if small:
        raise DataError(f"too few rows to split class {', '.join(small)}; each class needs at least {MIN_CLASS_ROWS}")
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[], [], []]
    for label in range(len(class_names)):
        rows = rng.permutation(np.flatnonzero(y == label))
        n_val = max(1, round(SPLIT_FRACTIONS[1] * len(rows)))
        n_test = max(1, round(SPLIT_FRACTIONS[2] * len(rows)))
        n_train = len(rows) - n_val - n_test
        for part, chunk in zip(parts, np.split(rows, [n_train, n_train + n_val]), strict=True):
            part.append(chunk)
    return tuple(np.sort(np.concatenate(part)) for part in parts)


def tabular_study_data(table: Table, seed: int = 0, folds: int = 1) -> StudyData:
    """Split ``table``, standardize with training statistics and wrap everything for the trainer;
    ``folds`` above 1 deals the rows outside the test split into that many folds (``studies._folds``)."""
    info = {"n_features": table.x.shape[1], "feature_names": list(table.feature_names), "source": table.source}
    return classification_study_data(table.x, table.y, table.class_names, Standardize.fit, seed, info, folds=folds)


def classification_study_data(
    x: np.ndarray,
    y: np.ndarray,
    class_names: list[str],
    fit_preprocess: Callable[[np.ndarray], nn.Module],
    seed: int,
    info: dict[str, Any],
    *,
    folds: int = 1,
) -> StudyData:
    """Split rows stratified by class, fit the preprocessing on the training rows only and wrap
    every split for the trainer (preprocessed once, here). ``info`` gets the class and split sizes.

    With ``folds`` above 1 the test split is the same; the training and validation rows together
    are what the final model trains on (``train``, and ``val`` too: nothing else is left), and
    ``StudyData.folds`` deals them into that many stratified folds for the search."""
    train_idx, val_idx, test_idx = split_indices(y, class_names, seed)
    parts: list[np.ndarray] = []
    if check_folds(folds) > 1:
        train_idx = np.sort(np.concatenate([train_idx, val_idx]))
        parts = fold_indices(train_idx, y, class_names, folds, seed)
        val_idx = train_idx
    preprocess = fit_preprocess(x[train_idx])
    sizes: dict[str, Any] = {"n_classes": len(class_names), "n_train": len(train_idx), "n_val": len(val_idx),
                             "n_test": len(test_idx)}  # fmt: skip
    if parts:
        sizes |= {"folds": folds, "n_fold_val": [len(p) for p in parts]}
    train = tensors(x, y, train_idx, preprocess)
    return StudyData(
        train=train,
        val=train if parts else tensors(x, y, val_idx, preprocess),
        test=tensors(x, y, test_idx, preprocess),
        task=Classification(len(class_names)),
        preprocess=preprocess,
        raw_example=x[train_idx[:5]].copy(),
        raw_test=x[test_idx].copy(),
        class_names=list(class_names),
        info={**info, **sizes},
        folds=make_folds(x, y, parts, fit_preprocess),
    )


def _read_frame(path: Path) -> Any:
    import pandas as pd

    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"{path}: unsupported file type {path.suffix!r}; use .csv or .parquet")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: file is empty")
    try:
        frame = getattr(pd, reader)(path)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: file is empty") from None
    except Exception as error:
        reason = (str(error).strip().splitlines() or [""])[0]
        raise DataError(f"{path}: cannot read: {type(error).__name__}: {reason}") from error
    if frame.empty:
        raise DataError(f"{path}: file is empty (no data rows)")
    return frame
