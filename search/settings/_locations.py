"""Where a search lives: its resolved locations, and the environment that hands them to child workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from storage import TrackingLocation

ENV_STORAGE = "SEARCH_STORAGE"
ENV_TRACKING = "SEARCH_TRACKING_URI"
ENV_ARTIFACTS = "SEARCH_ARTIFACT_LOCATION"
ENV_PROJECT = "SEARCH_PROJECT_DIR"
ENV_CONFIG = "SEARCH_CONFIG"
ENV_CHECKPOINTS = "SEARCH_CHECKPOINT_DIR"
ENV_TENSORBOARD = "SEARCH_TENSORBOARD_DIR"
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
    tensorboard_dir: Path | None = None
    """Where workers write TensorBoard event files (``<dir>/<study>/trial-<n>``); None: not at all."""

    def tracking(self) -> TrackingLocation:
        """The MLflow tracking and registry location these resolve to."""
        from storage import resolve_tracking

        return resolve_tracking(self.tracking_uri, self.project_dir, self.artifact_location)


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
    if loc.tensorboard_dir:
        env[ENV_TENSORBOARD] = str(loc.tensorboard_dir)
    return env
