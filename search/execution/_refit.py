"""A fit whose checkpoints cannot be resumed on this worker starts over (a trial's, a fold's, a rank's)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def fit_or_start_over(fit: Any, config: Any, infra: Any, what: str) -> Any:
    """``fit(config, infra)``, and when its checkpoints cannot be resumed here, ``fit`` from scratch.

    A retry may land on a worker unlike the first attempt's: other GPUs (``precision=auto`` resolves
    to another dtype), another group size or ``--sharding``. The trainer refuses such a checkpoint
    rather than resume it wrongly; the trial then starts over, on every rank alike (each reads the
    same checkpoint and gets the same refusal), with a fresh model.
    """
    import trainer

    try:
        return fit(config, infra)
    except trainer.CheckpointError as exc:
        log.warning("%s starts over: %s", what, exc)
        return fit(config, infra.replace(resume=False))
