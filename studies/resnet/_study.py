"""The ResNet study object: data source and settings, with the Study protocol's four methods."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import torch
from torch import nn

from studies._base import Direction, Fidelity, StudyData, check_precision, resolve_precision
from studies.resnet._data import digits_images, folder_images, image_study_data
from studies.resnet._model import build_resnet
from studies.resnet._params import ResNetParams, suggest_params
from trainer import Infra, TrainConfig

DATA_CHOICES = ("digits", "folder")
DIGITS_SIZE = 8
DEFAULT_FOLDER_SIZE = 32


@dataclass(frozen=True)
class ResNetStudy:
    """Image classification with a small ResNet; see :func:`studies.resnet.make_study`."""

    data: str = "digits"
    """``digits`` or ``folder``."""
    folder: Path | None = None
    """Image folder (one subfolder per class) when ``data`` is ``folder``."""
    image_size: int = DIGITS_SIZE
    """Side of the square images the model sees."""
    stages: int = 3
    """ResNet stages; each after the first halves the resolution."""
    seed: int = 0
    """Seeds the data split, the model's initial weights and training randomness."""
    precision: str = "auto"
    """Autocast: ``auto`` (bf16 on GPUs that have it, else full precision), ``no``, ``bf16``, ``fp16``."""
    name: str = "resnet"
    metric: str = "val_loss"
    direction: Direction = "minimize"
    mutable_params: ClassVar[Mapping[str, str]] = MappingProxyType({"lr": "lr", "weight_decay": "weight_decay"})
    """Search params population-based training may change in the middle of a trial, and the
    trainer field each sets (see ``studies.mutation_fields``). Not ``augment``: its strength lives in
    the model's ``Augment`` module, which the trainer neither compares on resume nor changes."""
    search_fidelity: Fidelity = field(default_factory=lambda: Fidelity(epochs=6))
    full_fidelity: Fidelity = field(default_factory=lambda: Fidelity(epochs=20))

    def __post_init__(self) -> None:
        check_precision(self.precision)
        if self.data not in DATA_CHOICES:
            raise ValueError(f"option data must be one of {', '.join(DATA_CHOICES)}, got {self.data!r}")
        if (self.data == "folder") != (self.folder is not None):
            raise ValueError(f"option folder is needed exactly when data=folder, got data={self.data}")
        if self.stages < 1 or self.image_size < 2 ** (self.stages - 1):
            raise ValueError(f"option image_size {self.image_size} is too small for {self.stages} stages")

    def suggest(self, trial: Any) -> ResNetParams:
        """Sample params from an ``optuna.Trial`` or ``optuna.trial.FixedTrial``."""
        return suggest_params(trial)

    def load_data(self) -> StudyData:
        """Load the images and split them (stratified 70/15/15 from ``seed``)."""
        images = digits_images() if self.folder is None else folder_images(self.folder, self.image_size)
        return image_study_data(images, self.image_size, self.seed)

    def build_model(self, params: ResNetParams, data: StudyData) -> nn.Module:
        """A freshly initialised :class:`ResNet`; the same ``seed`` and params give the same weights."""
        # Same seed, same initial weights: a replayed trial starts exactly where the searched one did.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return build_resnet(
                params,
                in_channels=data.info["in_channels"],
                n_classes=data.info["n_classes"],
                image_size=data.info["image_size"],
                stages=self.stages,
            )

    def train_config(self, params: ResNetParams, fidelity: Fidelity) -> TrainConfig:
        """AdamW with a short warmup and cosine decay for ``fidelity.epochs`` epochs."""
        return TrainConfig(
            epochs=fidelity.epochs,
            batch_size=params.batch_size,
            lr=params.lr,
            weight_decay=params.weight_decay,
            warmup_fraction=0.05,
            seed=self.seed,
            mixed_precision=resolve_precision(self.precision),
        )

    def train_infra(self, params: ResNetParams, fidelity: Fidelity) -> Infra:
        """On CUDA, channels-last convolutions, cuDNN autotuned for the fixed image size."""
        return Infra(channels_last=True, cudnn_benchmark=True)
