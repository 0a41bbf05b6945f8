"""Where MLflow runs, models and artifacts live."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from storage._engine import TCP_KEEPALIVE
from storage._errors import StorageError
from storage._urls import normalize_db_url, sqlite_url


@dataclass(frozen=True)
class TrackingLocation:
    """MLflow tracking and registry URI plus the artifact root of new experiments."""

    tracking_uri: str
    artifact_location: str | None
    """``None`` lets an MLflow server choose (proxied artifacts)."""

    @property
    def registry_uri(self) -> str:
        return self.tracking_uri

    @property
    def is_server(self) -> bool:
        return self.tracking_uri.startswith(("http://", "https://", "databricks"))


def resolve_tracking(
    tracking_uri: str | None, project_dir: Path, artifact_location: str | None = None
) -> TrackingLocation:
    """Embedded SQLite store under ``project_dir`` unless a database URL or server is given."""
    if tracking_uri is None:
        artifacts = artifact_location or (project_dir / "mlartifacts").resolve().as_uri()
        return TrackingLocation(sqlite_url(project_dir / "mlflow.db"), artifacts)
    if tracking_uri.startswith(("http://", "https://", "databricks")):
        return TrackingLocation(tracking_uri, artifact_location)
    if tracking_uri.startswith(("postgresql", "postgres", "sqlite", "mysql")):
        if artifact_location is None and not tracking_uri.startswith("sqlite"):
            artifact_location = (project_dir / "mlartifacts").resolve().as_uri()
        return TrackingLocation(_with_keepalive(normalize_db_url(tracking_uri)), artifact_location)
    if tracking_uri.startswith("file:") or "://" not in tracking_uri:
        raise StorageError("file-based MLflow stores have no model registry; use a database URL or an http:// server")
    raise StorageError(f"unsupported MLflow tracking URI scheme: {tracking_uri.split('://')[0]}://")


def prepare_sqlite_tracking(location: TrackingLocation) -> None:
    """Switch an embedded MLflow SQLite file to WAL so concurrent workers do not lock each other out."""
    if not location.tracking_uri.startswith("sqlite:///"):
        return
    from storage._engine import tune_sqlite_connections

    tune_sqlite_connections()
    path = Path(location.tracking_uri.removeprefix("sqlite:///"))
    if not path.exists():
        return
    with sqlite3.connect(path, timeout=60) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def _with_keepalive(url: str) -> str:
    if not url.startswith("postgresql"):
        return url
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    extra = {k: str(v) for k, v in TCP_KEEPALIVE.items() if k not in parsed.query}  # MLflow pre-pings already
    return parsed.update_query_dict(extra).render_as_string(hide_password=False)


TRACKING_POOL_SIZE = 2
TRACKING_MAX_OVERFLOW = 0


def bound_tracking_pool() -> None:
    """Bound MLflow's engine to what a worker uses at once (its default, 5 + 10 per process, fills
    PostgreSQL's max_connections with a few dozen workers); a user's own setting wins."""
    os.environ.setdefault("MLFLOW_SQLALCHEMYSTORE_POOL_SIZE", str(TRACKING_POOL_SIZE))
    os.environ.setdefault("MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW", str(TRACKING_MAX_OVERFLOW))
