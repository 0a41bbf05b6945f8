"""Resolving where a search lives: flags, then environment, then ``search.toml``, then defaults."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from search._errors import SearchError

ENV_STORAGE = "SEARCH_STORAGE"
ENV_TRACKING = "SEARCH_TRACKING_URI"
ENV_ARTIFACTS = "SEARCH_ARTIFACT_LOCATION"
ENV_PROJECT = "SEARCH_PROJECT_DIR"
ENV_CONFIG = "SEARCH_CONFIG"
ENV_CHECKPOINTS = "SEARCH_CHECKPOINT_DIR"
CONFIG_FILE = "search.toml"


@dataclass(frozen=True)
class Locations:
    """Where the Optuna study, MLflow runs and checkpoints of a search live (all resolved)."""

    project_dir: Path
    storage_url: str
    tracking_uri: str
    artifact_location: str | None
    checkpoint_root: Path
    embedded: bool
    """True when the Optuna storage is the embedded SQLite file under ``project_dir``."""
    extra: dict[str, Any] = field(default_factory=dict)


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


def location_env(loc: Locations) -> dict[str, str]:
    """Environment that makes a child ``search worker`` resolve to exactly ``loc``.

    Passed through the environment, not argv, so a password in a URL never shows up in ``ps``.
    """
    env = {
        ENV_PROJECT: str(loc.project_dir),
        ENV_STORAGE: loc.storage_url,
        ENV_TRACKING: loc.tracking_uri,
        ENV_CHECKPOINTS: str(loc.checkpoint_root),
    }
    if loc.artifact_location:
        env[ENV_ARTIFACTS] = loc.artifact_location
    return env
