"""A study ``resmlp`` with a registered champion, for `search export` and `search serve`: on the
embedded SQLite stores, and on PostgreSQL ones (Optuna's and MLflow's, two databases)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from search_helpers import fresh_database

START = ["start", "--study", "resmlp", "--trials", "1", "--workers", "1", "--study-option", "search_epochs=1",
         "--study-option", "full_epochs=2"]  # fmt: skip


@dataclass(frozen=True)
class Champion:
    """A project whose study ``resmlp`` has a registered champion: its MLflow store, and the flags
    that name its stores to `search` (none for the embedded ones)."""

    project: Path
    tracking_uri: str
    flags: tuple[str, ...] = ()

    def predict(self, rows: np.ndarray) -> np.ndarray:
        """The registered PyTorch model's outputs, as MLflow serves it."""
        import mlflow

        mlflow.set_tracking_uri(self.tracking_uri)
        mlflow.set_registry_uri(self.tracking_uri)
        return np.asarray(mlflow.pyfunc.load_model("models:/resmlp@champion").predict(rows))

    def run(self) -> Any:
        """The champion's MLflow run."""
        from mlflow import MlflowClient

        client = MlflowClient(self.tracking_uri, self.tracking_uri)  # the registry too: never another test's
        return client.get_run(client.get_model_version_by_alias("resmlp", "champion").run_id)


@pytest.fixture(scope="session")
def resmlp_champion(tmp_path_factory: pytest.TempPathFactory, cli: Any) -> Champion:
    """On the embedded stores, which `search` makes in the project."""
    project = tmp_path_factory.mktemp("export")
    cli(*START, cwd=project, check=True)
    return Champion(project, f"sqlite:///{project / '.search' / 'mlflow.db'}")


@pytest.fixture(scope="session", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def champion(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, cli: Any) -> Iterator[Champion]:
    """``resmlp_champion``, or one whose study and MLflow store are on PostgreSQL."""
    if request.param == "sqlite":
        yield request.getfixturevalue("resmlp_champion")
        return
    admin = request.getfixturevalue("pg_server")
    with fresh_database(admin) as optuna_url, fresh_database(admin) as mlflow_url:
        project = tmp_path_factory.mktemp("export-pg")
        flags = ("--storage", optuna_url, "--tracking-uri", mlflow_url)
        cli(*START, *flags, cwd=project, check=True)
        yield Champion(project, mlflow_url, flags)
