"""Resolving where a search lives: flags, then environment, then ``search.toml``, then defaults."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from search.exceptions import SearchError
from search.settings import (
    CONFIG_FILE,
    ENV_ARTIFACTS,
    ENV_CHECKPOINTS,
    ENV_CONFIG,
    ENV_PROJECT,
    ENV_STORAGE,
    ENV_TRACKING,
    Locations,
)


def read_config_file(path: Path | None) -> dict[str, Any]:
    """Keys of ``[search]`` (or top level) in a TOML file; an explicit path that is missing is an error."""
    explicit = path is not None or ENV_CONFIG in os.environ
    candidate = path or Path(os.environ.get(ENV_CONFIG, CONFIG_FILE))
    if not candidate.exists():
        if explicit:
            raise SearchError(f"config file {candidate} does not exist")
        return {}
    try:
        data = tomllib.loads(candidate.read_text())
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise SearchError(f"cannot read config file {candidate}: {exc}") from None
    section = data.get("search", data)
    return {str(k).replace("-", "_"): v for k, v in section.items()}


def resolve_locations(
    *,
    storage: str | None,
    tracking_uri: str | None,
    artifact_location: str | None,
    project_dir: Path | None,
    checkpoint_dir: Path | None = None,
    config_file: Path | None = None,
    create: bool = True,
) -> Locations:
    """Resolve every location once, in the process that was given the flags."""
    import storage as st

    conf = read_config_file(config_file)

    def pick(flag: Any, env: str, key: str) -> Any:
        return flag if flag is not None else os.environ.get(env) or conf.get(key)

    project = Path(pick(project_dir, ENV_PROJECT, "project_dir") or st.DEFAULT_DIRNAME).expanduser().resolve()
    storage_url = pick(storage, ENV_STORAGE, "storage")
    tracking = pick(tracking_uri, ENV_TRACKING, "tracking_uri")
    artifacts = pick(artifact_location, ENV_ARTIFACTS, "artifact_location")
    if create:
        project = st.ensure_project_dir(project)
    else:
        st.check_writable(project)
    url = st.sqlite_url(project / "optuna.db") if storage_url is None else st.normalize_db_url(storage_url)
    location = st.resolve_tracking(tracking, project, artifacts)
    ckpt = (
        Path(pick(checkpoint_dir, ENV_CHECKPOINTS, "checkpoint_dir") or project / "checkpoints").expanduser().resolve()
    )
    return Locations(project, url, location.tracking_uri, location.artifact_location, ckpt, st.is_sqlite(url))
