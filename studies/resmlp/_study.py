"""The resmlp study: search space, data sources and training config of a residual MLP."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import torch
from torch import nn

from studies._base import Direction, Fidelity, StudyData, check_precision, fidelities, resolve_precision
from studies._folds import check_folds
from studies._tabular import digits_table, file_table, synthetic_table, tabular_study_data
from studies.resmlp._model import ResMLP
from trainer import MixedPrecision, TrainConfig

WIDTHS = (64, 128, 256, 512)
BATCH_SIZES = (32, 64, 128, 256)
GRAD_ACCUM_STEPS = (1, 2, 4)
DATA_SOURCES = ("digits", "synthetic", "file")


@dataclass(frozen=True)
class ResMLPParams:
    """One point of the search space; field names equal the Optuna param names."""

    lr: float
    """Peak AdamW learning rate (log-uniform 1e-4..1e-2)."""
    weight_decay: float
    """AdamW weight decay (log-uniform 1e-6..1e-1)."""
    width: int
    """Hidden units of every block (64, 128, 256 or 512)."""
    depth: int
    """Number of residual blocks (1..6)."""
    dropout: float
    """Dropout after each block's activation (0..0.5)."""
    batch_size: int
    """Micro-batch size (32, 64, 128 or 256)."""
    warmup_fraction: float
    """Fraction of optimizer steps in linear warmup (0..0.2)."""
    grad_accum_steps: int
    """Micro-batches per optimizer step (1, 2 or 4)."""
    mixed_precision: MixedPrecision = "no"
    """Autocast dtype, from the study's ``precision`` option on the machine that trains (not searched)."""


@dataclass(frozen=True)
class ResMLPStudy:
    """Residual MLP classifier on digits, synthetic blobs or a user's CSV/Parquet file."""

    data: str = "digits"
    """Data source: ``digits``, ``synthetic`` or ``file`` (with ``path`` and ``target``)."""
    rows: int = 2000
    """Synthetic data only: number of rows."""
    features: int = 20
    """Synthetic data only: number of features."""
    classes: int = 4
    """Synthetic data only: number of classes."""
    path: Path | None = None
    """File data only: a .csv or .parquet file."""
    target: str | None = None
    """File data only: the label column."""
    seed: int = 0
    """Seeds the split, synthetic data, model initialisation and the trainer."""
    folds: int = 1
    """K-fold cross-validation: 1 is one validation split; K >= 2 deals the rows outside the test
    split into K stratified folds, and a search trial trains one model per fold."""
    precision: str = "auto"
    """Autocast: ``auto`` (bf16 on GPUs that have it, else full precision), ``no``, ``bf16``, ``fp16``."""
    search_fidelity: Fidelity = field(default_factory=lambda: Fidelity(epochs=15))
    full_fidelity: Fidelity = field(default_factory=lambda: Fidelity(epochs=40))
    name: str = "resmlp"
    metric: str = "val_loss"
    direction: Direction = "minimize"
    mutable_params: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"lr": "lr", "weight_decay": "weight_decay", "dropout": "dropout"}
    )
    """Search params population-based training may change in the middle of a trial, and the
    trainer field each sets (see ``studies.mutation_fields``)."""

    def __post_init__(self) -> None:
        check_precision(self.precision)
        check_folds(self.folds)
        if self.data not in DATA_SOURCES:
            raise ValueError(f"option data must be one of {', '.join(DATA_SOURCES)}, got {self.data!r}")
        is_file = self.data == "file"
        if is_file and (self.path is None or self.target is None):
            raise ValueError("data=file needs both options path and target")
        if not is_file and (self.path is not None or self.target is not None):
            raise ValueError(f"options path and target need data=file, got data={self.data}")
        if self.data == "synthetic" and (min(self.rows, self.features) < 1 or self.classes < 2):
            raise ValueError(
                f"synthetic data needs rows, features >= 1 and classes >= 2, "
                f"got rows={self.rows} features={self.features} classes={self.classes}"
            )

    def suggest(self, trial: Any) -> ResMLPParams:
        """Sample params from an ``optuna.Trial`` or ``optuna.trial.FixedTrial``."""
        return ResMLPParams(
            lr=trial.suggest_float("lr", 1e-4, 1e-2, log=True),
            weight_decay=trial.suggest_float("weight_decay", 1e-6, 1e-1, log=True),
            width=trial.suggest_categorical("width", WIDTHS),
            depth=trial.suggest_int("depth", 1, 6),
            dropout=trial.suggest_float("dropout", 0.0, 0.5),
            batch_size=trial.suggest_categorical("batch_size", BATCH_SIZES),
            warmup_fraction=trial.suggest_float("warmup_fraction", 0.0, 0.2),
            grad_accum_steps=trial.suggest_categorical("grad_accum_steps", GRAD_ACCUM_STEPS),
            mixed_precision=resolve_precision(self.precision),
        )

    def load_data(self) -> StudyData:
        """Load the configured source and split it (stratified 70/15/15 from ``seed``; with ``folds``
        above 1, the 85% outside the test split in that many folds)."""
        if self.data == "digits":
            table = digits_table()
        elif self.data == "synthetic":
            table = synthetic_table(self.rows, self.features, self.classes, seed=self.seed)
        else:
            assert self.path is not None and self.target is not None  # checked in __post_init__
            table = file_table(self.path, self.target)
        return tabular_study_data(table, seed=self.seed, folds=self.folds)

    def build_model(self, params: ResMLPParams, data: StudyData) -> nn.Module:
        """A freshly initialised :class:`ResMLP`; the same ``seed`` and params give the same weights."""
        # A private RNG stream: initialisation is reproducible without reseeding the caller's RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return ResMLP(
                n_features=data.info["n_features"],
                n_classes=data.info["n_classes"],
                width=params.width,
                depth=params.depth,
                dropout=params.dropout,
            )

    def train_config(self, params: ResMLPParams, fidelity: Fidelity) -> TrainConfig:
        """AdamW with warmup and cosine decay for ``fidelity.epochs`` epochs."""
        return TrainConfig(
            epochs=fidelity.epochs,
            batch_size=params.batch_size,
            lr=params.lr,
            weight_decay=params.weight_decay,
            warmup_fraction=params.warmup_fraction,
            grad_accum_steps=params.grad_accum_steps,
            mixed_precision=params.mixed_precision,
            seed=self.seed,
        )


def make_study(
    data: str | None = None,
    rows: int = 2000,
    features: int = 20,
    classes: int = 4,
    path: str | Path | None = None,
    target: str | None = None,
    seed: int = 0,
    folds: int = 1,
    search_epochs: int = 15,
    full_epochs: int = 40,
    data_fraction: float = 1.0,
    precision: str = "auto",
) -> ResMLPStudy:
    """Build the resmlp study. Options may arrive as strings (from the command line).

    Args:
        data: ``digits``, ``synthetic`` or ``file``; defaults to ``file`` when ``path`` is given,
            else ``digits``.
        rows: Synthetic data: rows.
        features: Synthetic data: features.
        classes: Synthetic data: classes.
        path: File data: a .csv or .parquet file.
        target: File data: the label column (numbers or strings).
        seed: Split, synthetic data, model init and trainer seed.
        folds: K-fold cross-validation: K >= 2 stratified folds of the rows outside the test split
            (a trial trains K models; its value is their mean); 1, the default, one validation split.
        search_epochs: Epochs per search trial.
        full_epochs: Epochs of the final (retrained) model.
        data_fraction: Fraction of the training split each search trial uses.
        precision: Autocast: ``auto`` (bf16 on a GPU that has it, else none), ``no``, ``bf16``, ``fp16``.

    Raises:
        ValueError: An option is out of range or options contradict each other.
    """
    return ResMLPStudy(
        data=data if data is not None else ("file" if path is not None else "digits"),
        rows=int(rows),
        features=int(features),
        classes=int(classes),
        path=None if path is None else Path(path),
        target=target,
        seed=int(seed),
        folds=int(folds),
        precision=str(precision),
        **fidelities(search_epochs, full_epochs, data_fraction),
    )
