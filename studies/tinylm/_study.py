"""The tiny-LM study object: corpus and settings, with the Study protocol's four methods."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import torch
from torch import nn

from studies._base import Direction, Fidelity, StudyData, check_precision, resolve_precision
from studies.tinylm._data import default_corpus, read_corpus, text_study_data
from studies.tinylm._model import TinyLM
from studies.tinylm._params import TinyLMParams, suggest_params
from trainer import TrainConfig


@dataclass(frozen=True)
class TinyLMStudy:
    """Character-level language modelling; see :func:`studies.tinylm.make_study`."""

    text_path: Path | None = None
    """A UTF-8 text file; ``None`` uses Python's bundled documentation."""
    context: int = 64
    """Window length of the data and the longest context searched."""
    max_chars: int = 50_000
    """Characters of the corpus used (its beginning)."""
    batch_size: int = 32
    tie_weights: bool = True
    activation_checkpointing: bool = False
    seed: int = 0
    """Seeds the model's initial weights and training randomness."""
    precision: str = "auto"
    """Autocast: ``auto`` (bf16 on GPUs that have it, else full precision), ``no``, ``bf16``, ``fp16``."""
    name: str = "tinylm"
    metric: str = "val_loss"
    direction: Direction = "minimize"
    mutable_params: ClassVar[Mapping[str, str]] = MappingProxyType({"lr": "lr", "dropout": "dropout"})
    """Search params population-based training may change in the middle of a trial, and the
    trainer field each sets (see ``studies.mutation_fields``); weight decay is not searched here."""
    search_fidelity: Fidelity = field(default_factory=lambda: Fidelity(epochs=3))
    full_fidelity: Fidelity = field(default_factory=lambda: Fidelity(epochs=10))

    def __post_init__(self) -> None:
        check_precision(self.precision)
        if self.context < 2:
            raise ValueError(f"option context must be >= 2, got {self.context}")
        if self.max_chars < 20 * self.context:
            raise ValueError(f"option max_chars must be >= 20 x context ({20 * self.context}), got {self.max_chars}")
        if self.batch_size < 1:
            raise ValueError(f"option batch_size must be >= 1, got {self.batch_size}")

    def suggest(self, trial: Any) -> TinyLMParams:
        """Sample params from an ``optuna.Trial`` or ``optuna.trial.FixedTrial``."""
        return suggest_params(trial, self.context, self.tie_weights, self.activation_checkpointing)

    def load_data(self) -> StudyData:
        """Read the corpus, split it 80/10/10 and cut it into next-character windows."""
        if self.text_path is None:
            return text_study_data(default_corpus(self.max_chars), self.context, "python-docs")
        return text_study_data(read_corpus(self.text_path, self.max_chars), self.context, str(self.text_path))

    def build_model(self, params: TinyLMParams, data: StudyData) -> nn.Module:
        """A freshly initialised :class:`TinyLM`; the same ``seed`` and params give the same weights."""
        window = data.info["context"]
        if window % params.context:
            raise ValueError(f"params.context ({params.context}) must divide the data's window ({window})")
        # Same seed, same initial weights: a replayed trial starts exactly where the searched one did.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return TinyLM(data.info["vocab_size"], params)

    def train_config(self, params: TinyLMParams, fidelity: Fidelity) -> TrainConfig:
        """AdamW with the searched warmup and cosine decay for ``fidelity.epochs`` epochs."""
        return TrainConfig(
            epochs=fidelity.epochs,
            batch_size=self.batch_size,
            lr=params.lr,
            warmup_fraction=params.warmup_fraction,
            seed=self.seed,
            mixed_precision=resolve_precision(self.precision),
        )
