"""Tabular sources, the fixed stratified split, train-only standardization and bad data files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from studies import DataError, StudyData
from studies._tabular import (
    Standardize,
    Table,
    digits_table,
    file_table,
    split_indices,
    synthetic_table,
    tabular_study_data,
)
from trainer import TensorData


@pytest.fixture(scope="module")
def digits() -> Table:
    return digits_table()


def test_digits_split_is_stratified_disjoint_and_seeded(digits: Table) -> None:
    train, val, test = split_indices(digits.y, digits.class_names, seed=0)
    assert len(train) + len(val) + len(test) == len(digits.y) == 1797
    assert len(set(train) | set(val) | set(test)) == 1797
    for part, fraction in ((train, 0.70), (val, 0.15), (test, 0.15)):
        assert len(part) == pytest.approx(fraction * 1797, abs=10)
        per_class = np.bincount(digits.y[part], minlength=10) / np.bincount(digits.y)
        np.testing.assert_allclose(per_class, fraction, atol=0.02)
    again = split_indices(digits.y, digits.class_names, seed=0)
    other = split_indices(digits.y, digits.class_names, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again, strict=True))
    assert not np.array_equal(test, other[2])


def _splits(data: StudyData) -> tuple[TensorData, TensorData, TensorData]:
    assert isinstance(data.train, TensorData) and isinstance(data.val, TensorData)
    assert isinstance(data.test, TensorData)
    return data.train, data.val, data.test


def test_standardization_uses_training_rows_only(digits: Table) -> None:
    data = tabular_study_data(digits, seed=0)
    train, val, _ = _splits(data)
    train_idx, val_idx, _ = split_indices(digits.y, digits.class_names, seed=0)
    raw_train = digits.x[train_idx].astype(np.float64)
    varying = raw_train.std(axis=0) > 0
    assert isinstance(data.preprocess, Standardize)

    mean, std = data.preprocess.mean.numpy(), data.preprocess.std.numpy()
    np.testing.assert_allclose(mean, raw_train.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(std[varying], raw_train.std(axis=0)[varying], rtol=1e-5)
    assert not np.allclose(mean, digits.x.mean(axis=0), rtol=1e-4)  # would pass if fitted on all rows

    np.testing.assert_allclose(train.x.mean(0).numpy()[varying], 0, atol=1e-4)
    expected_val = (digits.x[val_idx] - mean) / std
    np.testing.assert_allclose(val.x.numpy(), expected_val, rtol=1e-5, atol=1e-5)


def test_study_data_holds_model_ready_tensors_and_raw_rows(digits: Table) -> None:
    data = tabular_study_data(digits, seed=0)
    train, val, test = _splits(data)
    assert train.x.dtype == torch.float32 and train.y.dtype == torch.int64
    sizes = (data.info["n_train"], data.info["n_val"], data.info["n_test"])
    assert (len(train), len(val), len(test)) == sizes
    assert data.info["n_features"] == 64 and data.info["n_classes"] == 10
    assert data.class_names == [str(i) for i in range(10)]
    assert data.raw_example is not None and data.preprocess is not None
    assert data.raw_example.dtype == np.float32 and data.raw_example.shape == (5, 64)
    # The exported model's preprocess turns raw rows into exactly what training saw.
    processed = data.preprocess(torch.from_numpy(data.raw_example))
    torch.testing.assert_close(processed, train.x[:5])
    # raw_test is the test split as exported files take it: row for row, what the test tensors hold.
    assert data.raw_test is not None and data.raw_test.shape == (len(test), 64)
    torch.testing.assert_close(data.preprocess(torch.from_numpy(data.raw_test)), test.x)


def test_synthetic_data_is_seeded_and_balanced() -> None:
    table = synthetic_table(rows=600, features=8, classes=3, seed=5)
    assert table.x.shape == (600, 8) and table.x.dtype == np.float32
    assert np.bincount(table.y).tolist() == [200, 200, 200]
    np.testing.assert_array_equal(table.x, synthetic_table(600, 8, 3, seed=5).x)
    assert not np.array_equal(table.x, synthetic_table(600, 8, 3, seed=6).x)


def _animals(rows_per_class: int = 20) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    species = np.repeat(["emu", "cat", "dog"], rows_per_class)
    frame = pd.DataFrame(rng.normal(size=(len(species), 3)), columns=["a", "b", "c"])
    frame.insert(1, "species", species)
    return frame


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_file_round_trip_with_string_target(tmp_path: Path, suffix: str) -> None:
    frame = _animals()
    path = tmp_path / f"animals{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)

    table = file_table(path, target="species")
    assert table.class_names == ["cat", "dog", "emu"]
    assert table.feature_names == ["a", "b", "c"]
    assert [table.class_names[i] for i in table.y] == frame["species"].tolist()
    np.testing.assert_allclose(table.x, frame[["a", "b", "c"]].to_numpy(), rtol=1e-6)
    data = tabular_study_data(table, seed=0)
    assert data.info["n_train"] + data.info["n_val"] + data.info["n_test"] == 60


def _write(path: Path, frame: pd.DataFrame) -> Path:
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    ("name", "text", "phrase"),
    [
        ("absent.csv", None, "data file not found"),
        ("empty.csv", "", "file is empty"),
        ("header.csv", "a,b,label\n", "file is empty"),
        ("table.xlsx", "a,label\n1,x\n", "unsupported file type '.xlsx'; use .csv or .parquet"),
        ("corrupt.parquet", "a,label\n1,x\n", "cannot read"),
        ("no_label.csv", "a,b,kind\n1,2,x\n", "target column 'label' not found; columns are: a, b, kind"),
        ("only_label.csv", "label\nx\n", "no feature columns"),
        ("colour.csv", "a,colour,size,label\n1,red,big,x\n", "non-numeric feature columns: colour, size"),
        ("gaps.csv", "a,b,label\n1,,x\n2,3,y\n", "missing values in columns: b"),
        ("no_target.csv", "a,label\n1,x\n2,\n", "missing values in columns: label (target)"),
    ],
)
def test_bad_files_raise_one_clear_data_error(tmp_path: Path, name: str, text: str | None, phrase: str) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(DataError) as info:
        file_table(path, target="label")
    assert phrase in str(info.value)
    assert "\n" not in str(info.value)


def test_class_too_small_to_split_is_named(tmp_path: Path) -> None:
    frame = pd.concat([_animals(), _animals(1).iloc[:2].assign(species="yak")], ignore_index=True)
    table = file_table(_write(tmp_path / "rare.csv", frame), target="species")
    with pytest.raises(DataError, match=r"too few rows to split class 'yak' \(2 rows\)"):
        tabular_study_data(table)


def test_digits_are_scikit_learns_without_importing_sklearn_datasets():
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits

    from studies._tabular import digits_table

    table, bunch = digits_table(), load_digits()
    assert np.array_equal(table.x, bunch.data.astype(np.float32))
    assert np.array_equal(table.y, bunch.target)
    assert table.feature_names == list(bunch.feature_names)
    assert table.class_names == [str(n) for n in bunch.target_names]
    code = "import sys; from studies._tabular import digits_table; digits_table(); print('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() \
        == "False"  # fmt: skip
