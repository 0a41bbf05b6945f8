"""The study interface: what a built-in or user study must provide.

A study is a small object. ``suggest`` is the only place an Optuna trial is seen; it returns a
frozen params dataclass. Everything else takes those params. Replaying the best trial is
``study.suggest(optuna.trial.FixedTrial(best_params))`` followed by the same calls as a search
trial, so a retrained model is built exactly like the searched one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, cast, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    from torch import nn

    from trainer import Infra, Task, TrainConfig, TrainData

Direction = Literal["minimize", "maximize"]


@dataclass(frozen=True)
class Fidelity:
    """How much training one evaluation gets."""

    epochs: int
    """Epochs per trial (search) or for the final model (full)."""
    data_fraction: float = 1.0
    """Fraction of the training split used; the validation split is always used whole."""

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"Fidelity.epochs must be >= 1, got {self.epochs}")
        if not 0 < self.data_fraction <= 1:
            raise ValueError(f"Fidelity.data_fraction must be in (0, 1], got {self.data_fraction}")


class Fidelities(TypedDict):
    search_fidelity: Fidelity
    full_fidelity: Fidelity


def fidelities(search_epochs: int | str, full_epochs: int | str, data_fraction: float | str = 1.0) -> Fidelities:
    """``search_fidelity`` and ``full_fidelity`` from a ``make_study``'s options (which may be strings)."""
    return {
        "search_fidelity": Fidelity(epochs=int(search_epochs), data_fraction=float(data_fraction)),
        "full_fidelity": Fidelity(epochs=int(full_epochs)),
    }


PRECISIONS = ("auto", "no", "bf16", "fp16")


def check_precision(value: str) -> str:
    """A ``precision`` study option, checked: ``auto``, ``no``, ``bf16`` or ``fp16``."""
    if value not in PRECISIONS:
        raise ValueError(f"option precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return value


def resolve_precision(precision: str) -> Literal["no", "bf16", "fp16"]:
    """The autocast dtype a fit on this machine uses: ``auto`` is bf16 on a CUDA GPU that has it
    (Ampere and newer) and full precision elsewhere; the others are taken as given."""
    if precision == "auto":
        import torch

        native = torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
        return "bf16" if native else "no"  # emulated bf16 (V100, T4) is slower than fp32
    return check_precision(precision)  # type: ignore[return-value]


def as_bool(option: str, value: bool | str) -> bool:
    """A ``make_study`` option that is a flag; from the command line it arrives as a string."""
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"option {option} must be true or false, got {value!r}")
        return value.lower() in ("true", "1", "yes")
    return bool(value)


@dataclass(frozen=True)
class Fold:
    """One fold of k-fold cross-validation: train on the other folds' rows, validate on this one's."""

    train: TrainData
    val: TrainData


@dataclass(frozen=True)
class StudyData:
    """Everything a worker loads once and reuses for all of its trials."""

    train: TrainData
    val: TrainData
    test: TrainData
    """Held out: never touched during search, evaluated once at retrain."""
    task: Task
    """Loss and validation metrics (e.g. ``trainer.Classification(num_classes)``)."""
    preprocess: nn.Module | None = None
    """Maps raw inputs to model inputs (fitted on the training split only). Exported models are
    ``nn.Sequential(preprocess, model)`` so they accept raw rows."""
    raw_example: np.ndarray | None = None
    """A few raw input rows, used as the MLflow input example / signature."""
    raw_test: np.ndarray | None = None
    """The test split's raw input rows, in ``test``'s order: what exported files (which include
    ``preprocess``) take, so they can be scored on the test split. Not needed without ``preprocess``."""
    class_names: list[str] | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    """Shape facts the model needs (``n_features``, ``n_classes``, ``vocab_size`` ...)."""
    folds: tuple[Fold, ...] = ()
    """K-fold cross-validation (K >= 2), else empty: a search trial fits each fold and its value is
    the mean of theirs. ``train`` then holds every fold's rows (the final model trains on them all)
    and ``val`` is the same rows: nothing is held out but ``test``."""


@runtime_checkable
class Study(Protocol):
    """A search problem. See ``studies.resmlp`` for a complete example.

    A study may also define ``train_infra(params, fidelity) -> trainer.Infra``: how its fits run
    (e.g. ``channels_last`` for a convolutional network), none of which changes what is trained.
    It is optional (read through :func:`study_infra`); the caller sets the checkpoint fields.

    A study may also declare ``mutable_params: Mapping[str, str]``: the search params that may change
    in the middle of a trial's training (population-based training), each mapped onto the trainer
    field it sets (``lr``, ``weight_decay`` or ``dropout``, see ``trainer.MUTABLE_FIELDS``). Optional
    too (read through :func:`studies.mutable_params`); without it no param may change.
    """

    name: str
    """Registered model name and default Optuna study name."""
    metric: str
    """Key of ``FitResult.history`` entries that is optimised and reported to the pruner."""
    direction: Direction
    search_fidelity: Fidelity
    full_fidelity: Fidelity

    def suggest(self, trial: Any) -> Any:
        """Sample params from ``trial`` (an ``optuna.Trial`` or ``FixedTrial``); return a frozen dataclass."""
        ...

    def load_data(self) -> StudyData:
        """Load and split the data; called once per worker process."""
        ...

    def build_model(self, params: Any, data: StudyData) -> nn.Module:
        """Build a freshly initialised model for ``params``."""
        ...

    def train_config(self, params: Any, fidelity: Fidelity) -> TrainConfig:
        """The training config for ``params`` at ``fidelity`` (epochs come from the fidelity)."""
        ...


def study_infra(study: Study, params: Any, fidelity: Fidelity) -> Infra:
    """``study.train_infra(params, fidelity)`` where the study defines it, else ``trainer.Infra()``."""
    choose = getattr(study, "train_infra", None)
    if choose is None:
        import trainer

        return trainer.Infra()
    return cast("Infra", choose(params, fidelity))
