"""What a worker holds while it runs trials, and what each trial comes to."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from search.coordination import Coordinator
    from search.settings import StudyRecord
    from search.tracking import Tracker
    from studies import Study, StudyData
    from trainer import TrainData

ENV_SHARDING = "HPSEARCH_SHARDING"
"""``search worker --sharding``, handed to the ranks it launches: ``ddp`` or ``fsdp``."""


def group_sharding() -> str:
    """How this trial group's fits split the work (``TrainConfig.sharding``)."""
    return os.environ.get(ENV_SHARDING, "ddp")


@dataclass
class WorkerContext:
    """What a worker loads once and reuses for every trial."""

    study: Study
    data: StudyData
    search_train: TrainData
    record: StudyRecord
    coordinator: Coordinator
    optuna_study: optuna.Study
    tracker: Tracker
    experiment_id: str
    parent_run_id: str
    checkpoint_root: Path
    worker_id: str
    gang: Any = None
    """For a multi-process trial: rank 0's link to the other ranks (``_gang.Gang``)."""
    tensorboard_dir: Path | None = None
    """Where each trial also writes TensorBoard event files (``<dir>/<study>/trial-<n>``)."""

    pruner_trials: Any = None
    """The study's trials as this worker last read them (``storage.StudyTrials``): for its claims
    (the sampler's view) and its pruner; finished trials are read once."""
    cpu_at_claim: float = 0.0
    """``time.process_time()`` when this worker began claiming its current trial."""

    def __post_init__(self) -> None:
        import storage

        # Dead trials this worker reaps get their MLflow run ended as well.
        self.coordinator.on_reaped = self.tracker.end_dead_run
        self.pruner_trials = storage.StudyTrials(self.coordinator.storage, self.optuna_study._study_id)


@dataclass(frozen=True)
class TrialOutcome:
    number: int
    state: str
    value: float | None
    fit_seconds: float
    wall_seconds: float
    reason: str = ""
    retried: bool = False
    """A retry continues this attempt (it was lost, or failed through no fault of its own): its
    checkpoints stay for the retry to resume from."""
