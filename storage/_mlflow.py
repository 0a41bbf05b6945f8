"""Where MLflow runs, models and artifacts live."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from storage._engine import TCP_KEEPALIVE
from storage._errors import StorageError
from storage._urls import normalize_db_url, sqlite_url

log = logging.getLogger(__name__)


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
    """Make an embedded MLflow SQLite file ready for concurrent workers.

    A new file starts as a copy of an empty, fully migrated store (made once per MLflow version in
    the user's cache: MLflow creates a store by running all its schema migrations, about 2 s, on
    the critical path of every new project's `search start`). The file is switched to WAL so
    concurrent workers do not lock each other out.
    """
    if not location.tracking_uri.startswith("sqlite:///"):
        return
    from storage._engine import tune_sqlite_connections

    tune_sqlite_connections()
    path = Path(location.tracking_uri.removeprefix("sqlite:///"))
    if not path.exists():
        _copy_empty_store(path)
    if not path.exists():
        return
    with sqlite3.connect(path, timeout=60) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def empty_store_template() -> Path:
    """Where this MLflow version's empty store is kept (``$XDG_CACHE_HOME/hpsearch``)."""
    import mlflow.version

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hpsearch"
    return cache / f"mlflow-{mlflow.version.VERSION}-empty.db"


def _copy_empty_store(path: Path) -> None:
    """Put an empty migrated MLflow store at ``path`` (best effort: MLflow creates one otherwise)."""
    try:
        template = empty_store_template()
        if not template.exists():
            _make_empty_store(template)
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        shutil.copyfile(template, temp)
        try:
            os.link(temp, path)  # never over a store another process made meanwhile
        except FileExistsError:
            pass
        finally:
            temp.unlink(missing_ok=True)
    except Exception as exc:  # noqa: BLE001 - a read-only home, a full disk: MLflow makes the store itself
        log.debug("no copy of an empty MLflow store at %s: %s", path, exc)


def _make_empty_store(template: Path) -> None:
    """Let MLflow create and migrate a store, then empty it of its Default experiment: a copy gets
    its own, with that copy's artifact root, when MLflow first opens it."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    template.parent.mkdir(parents=True, exist_ok=True)
    temp = template.with_name(f".{template.name}.{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)
    store = SqlAlchemyStore(f"sqlite:///{temp}", str(template.parent / "unused-artifacts"))
    store.engine.dispose()
    with sqlite3.connect(temp) as conn:
        conn.execute("DELETE FROM experiment_tags")
        conn.execute("DELETE FROM experiments")
    conn.close()
    os.replace(temp, template)  # atomic: a concurrent maker's copy is as good


def _with_keepalive(url: str) -> str:
    if not url.startswith("postgresql"):
        return url
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    extra = {k: str(v) for k, v in TCP_KEEPALIVE.items() if k not in parsed.query}  # MLflow pre-pings already
    return parsed.update_query_dict(extra).render_as_string(hide_password=False)


# MLflow's engine when its store is a database. One MLflow call may hold two connections at once
# (SqlAlchemyStore.log_batch opens a session for each of params, metrics and tags inside its own), so
# a thread needs 2, and a pool of 2 shared by two writing threads (the writer, a dead run's ending)
# could leave each holding one and waiting for the other's: 2 more as overflow keep that from ever
# waiting for good. An overflow of 0 cannot be asked for: MLflow (3.x) passes the setting only when
# it is not zero, and SQLAlchemy's default (10) applies. Through an MLflow server, workers hold none.
TRACKING_POOL_SIZE = 2
TRACKING_MAX_OVERFLOW = 2


def bound_tracking_pool() -> None:
    """Bound MLflow's engine to what a worker uses at once (its default, 5 + 10 per process, fills
    PostgreSQL's max_connections with a few dozen workers); a user's own setting wins."""
    os.environ.setdefault("MLFLOW_SQLALCHEMYSTORE_POOL_SIZE", str(TRACKING_POOL_SIZE))
    os.environ.setdefault("MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW", str(TRACKING_MAX_OVERFLOW))
