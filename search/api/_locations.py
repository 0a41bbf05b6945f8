"""Where a study lives: every location flag (or its variable) resolved once, in one place."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from search.settings import (
    ENV_ARTIFACTS,
    ENV_CHECKPOINTS,
    ENV_PROJECT,
    ENV_STORAGE,
    ENV_TENSORBOARD,
    ENV_TRACKING,
    Locations,
)

MLFLOW_TRACKING_ENV = "MLFLOW_TRACKING_URI"
"""MLflow's own variable: the tracking default when ``SEARCH_TRACKING_URI`` is not set."""


def resolve_locations(
    *,
    storage: str | None,
    tracking_uri: str | None,
    artifact_location: str | None,
    project_dir: Path | None,
    checkpoint_dir: Path | None = None,
    tensorboard_dir: Path | None = None,
    create: bool = True,
) -> Locations:
    """Resolve every location once, in the process that was given the flags (or their variables)."""
    import storage as st

    def pick(flag: Any, *envs: str) -> Any:
        return flag if flag is not None else next((os.environ[e] for e in envs if os.environ.get(e)), None)

    project = Path(pick(project_dir, ENV_PROJECT) or st.DEFAULT_DIRNAME).expanduser().resolve()
    storage_url = pick(storage, ENV_STORAGE)
    tracking = pick(tracking_uri, ENV_TRACKING, MLFLOW_TRACKING_ENV)
    artifacts = pick(artifact_location, ENV_ARTIFACTS)
    if create:
        project = st.ensure_project_dir(project)
    else:
        st.check_writable(project)
    url = st.sqlite_url(project / "optuna.db") if storage_url is None else st.normalize_db_url(storage_url)
    location = st.resolve_tracking(tracking, project, artifacts)
    ckpt = Path(pick(checkpoint_dir, ENV_CHECKPOINTS) or project / "checkpoints").expanduser().resolve()
    board = pick(tensorboard_dir, ENV_TENSORBOARD)
    return Locations(project, url, location.tracking_uri, location.artifact_location, ckpt, storage_url is None,
                     tensorboard_dir=Path(board).expanduser().resolve() if board else None)  # fmt: skip
