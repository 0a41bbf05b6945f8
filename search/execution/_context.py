"""What a worker holds while it runs trials, and what each trial comes to."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.coordination import EXPERIMENT_ATTR, PARENT_RUN_ATTR, outage_limit

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


PARENT_WAIT_S = 120.0
"""How long a trial's run waits for the study's parent run beyond ``--db-outage-limit`` (``search
start`` creates it once the study exists, while its early workers' first trials train: seconds, or
as long as it rides out a tracking outage; a command that died meanwhile never does)."""


class ParentRun:
    """The study's MLflow experiment and parent run, as the study records them.

    An early worker joins a new study before ``search start`` has created them (importing MLflow
    and making the run take seconds, which its first trial spends training): :meth:`ids` then reads
    the study until they appear. Every other worker joins a study that has them.
    """

    def __init__(self, attrs: Mapping[str, Any], read: Callable[[], Mapping[str, Any]]) -> None:
        self._ids = self._found(attrs)
        self._read = read

    @staticmethod
    def _found(attrs: Mapping[str, Any]) -> tuple[str, str] | None:
        if PARENT_RUN_ATTR not in attrs or EXPERIMENT_ATTR not in attrs:
            return None
        return str(attrs[EXPERIMENT_ATTR]), str(attrs[PARENT_RUN_ATTR])

    @property
    def known(self) -> bool:
        return self._ids is not None

    def ids(self, timeout: float | None = None) -> tuple[str, str]:
        """``(experiment id, parent run id)``, read from the study until they are there: a
        :class:`search.tracking.RunStartError` past ``timeout`` (default: :data:`PARENT_WAIT_S`
        more than the outage limit, the longest the command waits for MLflow)."""
        limit = PARENT_WAIT_S + outage_limit() if timeout is None else timeout
        deadline = time.monotonic() + limit
        delay = 0.05
        while self._ids is None:
            self._ids = self._found(self._read())
            if self._ids is not None:
                break
            if time.monotonic() >= deadline:
                from search.tracking import RunStartError

                raise RunStartError("MLflow run could not start: the study has no MLflow parent run "
                                    f"(`search start` did not create it within {limit:g} s)")  # fmt: skip
            time.sleep(delay)
            delay = min(2 * delay, 1.0)
        return self._ids


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
    parent: ParentRun
    checkpoint_root: Path
    worker_id: str
    gang: Any = None
    """For a multi-process trial: rank 0's link to the other ranks (``_gang.Gang``)."""
    tensorboard_dir: Path | None = None
    """Where each trial also writes TensorBoard event files (``<dir>/<study>/trial-<n>``)."""

    search_folds: tuple[TrainData, ...] = ()
    """With k-fold data (``StudyData.folds``): each fold's training rows at the search fidelity's
    data fraction, as ``search_train`` is of the training split."""

    pruner_trials: Any = None
    """The study's trials as this worker last read them (``storage.StudyTrials``): for its claims
    (the sampler's view) and its pruner; finished trials are read once."""
    cpu_at_claim: float = 0.0
    """``time.process_time()`` when this worker began claiming its current trial."""

    @property
    def experiment_id(self) -> str:
        return self.parent.ids()[0]

    @property
    def parent_run_id(self) -> str:
        return self.parent.ids()[1]

    def __post_init__(self) -> None:
        import storage

        # Dead trials this worker reaps get their MLflow run ended as well.
        self.coordinator.on_reaped = self.tracker.end_dead_run
        self.pruner_trials = storage.StudyTrials(self.coordinator.storage, storage.study_id(self.optuna_study))


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
