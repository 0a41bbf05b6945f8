"""K-fold splits (the ``folds`` study option): stratified, disjoint, seeded, the test split untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from studies import DataError, StudyLoadError, get_study
from studies._folds import fold_indices
from studies._tabular import digits_table, split_indices, synthetic_table, tabular_study_data


def _rows(data_x: torch.Tensor, raw: np.ndarray, preprocess: torch.nn.Module) -> set[bytes]:
    """Which raw rows a split holds, found by preprocessing every raw row the same way."""
    with torch.no_grad():
        every = preprocess(torch.from_numpy(raw)).numpy()
    index = {row.tobytes(): i for i, row in enumerate(every)}
    return {index[row.tobytes()] for row in data_x.numpy()}


def test_digits_folds_are_stratified_disjoint_cover_the_rest_and_leave_the_test_rows_alone() -> None:
    table = digits_table()
    train, val, test = split_indices(table.y, table.class_names, seed=0)
    rest = np.sort(np.concatenate([train, val]))
    parts = fold_indices(rest, table.y, table.class_names, 5, seed=0)
    assert len(parts) == 5
    assert np.array_equal(np.sort(np.concatenate(parts)), rest)  # every row once: disjoint and complete
    assert not set(np.concatenate(parts)) & set(test)
    counts = np.stack([np.bincount(table.y[p], minlength=10) for p in parts])
    assert (counts.max(axis=0) - counts.min(axis=0) <= 1).all()  # each class split evenly over the folds
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_folds_are_the_seeds_own() -> None:
    y = np.arange(300) % 3
    rows = np.arange(40, 300)
    names = ["a", "b", "c"]
    same = fold_indices(rows, y, names, 3, seed=7), fold_indices(rows, y, names, 3, seed=7)
    other = fold_indices(rows, y, names, 3, seed=8)
    assert all(np.array_equal(a, b) for a, b in zip(*same, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(same[0], other, strict=True))


def test_a_class_with_fewer_rows_than_folds_is_refused_in_one_line() -> None:
    y = np.array([0] * 20 + [1] * 3)
    with pytest.raises(DataError, match=r"folds=4: too few rows outside the test split in class 'b' \(3 rows\)"):
        fold_indices(np.arange(23), y, ["a", "b"], 4, seed=0)


def test_study_data_keeps_the_test_split_and_trains_the_final_model_on_every_fold() -> None:
    table = synthetic_table(rows=400, features=6, classes=4, seed=3)
    one = tabular_study_data(table, seed=3)
    kfold = tabular_study_data(table, seed=3, folds=4)
    test = _rows(one.test.x, table.x, one.preprocess)
    assert _rows(kfold.test.x, table.x, kfold.preprocess) == test  # the same held-out rows
    rest = _rows(one.train.x, table.x, one.preprocess) | _rows(one.val.x, table.x, one.preprocess)
    assert _rows(kfold.train.x, table.x, kfold.preprocess) == rest and kfold.val is kfold.train
    assert len(kfold.folds) == 4 and kfold.info["folds"] == 4
    for fold in kfold.folds:
        # Each fold's preprocessing is fitted on its own training rows: they come out standardized.
        assert fold.train.x.mean(dim=0).abs().max() < 1e-4
        assert abs(fold.train.x.std(dim=0, correction=0) - 1).max() < 1e-3
        assert len(fold.train) + len(fold.val) == len(rest)
    assert one.folds == ()


def test_fold_validation_rows_partition_the_rest() -> None:
    """Fold k validates on rows no other fold validates on, and trains on all the others."""
    table = synthetic_table(rows=240, features=4, classes=3, seed=0)
    data = tabular_study_data(table, seed=0, folds=3)
    labels = np.concatenate([f.val.y.numpy() for f in data.folds])
    assert len(labels) == len(data.train)
    np.testing.assert_array_equal(np.bincount(labels), np.bincount(data.train.y.numpy()))


@pytest.mark.parametrize("folds", ["0", "-2", "21"])
def test_resmlp_refuses_a_bad_folds_option(folds: str) -> None:
    with pytest.raises(StudyLoadError, match="option folds must be 1"):
        get_study("resmlp", data="synthetic", folds=folds)


def test_resmlp_folds_option_reaches_its_data() -> None:
    study = get_study("resmlp", data="synthetic", rows="300", folds="3")
    data = study.load_data()
    assert len(data.folds) == 3 and data.info["n_test"] == len(data.test)
