import pytest

import storage
from storage import StorageError


def test_plain_postgresql_urls_map_to_psycopg2():
    assert storage.normalize_db_url("postgresql://u@h:5432/db") == "postgresql+psycopg2://u@h:5432/db"
    assert storage.normalize_db_url("postgres://u@h/db").startswith("postgresql+psycopg2://")
    assert storage.normalize_db_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


def test_psycopg3_driver_is_kept_and_other_drivers_are_refused_with_a_hint():
    assert storage.normalize_db_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"  # installed
    with pytest.raises(StorageError, match="postgresql\\+psycopg://"):
        storage.normalize_db_url("postgresql+pg8000://u@h/db")


def test_passwords_are_masked_in_any_text():
    text = "failed for postgresql+psycopg2://alice:s3cr3t@db:5432/x and http://bob:pw@mlflow:5000"
    masked = storage.mask(text)
    assert "s3cr3t" not in masked and "pw@" not in masked
    assert "alice:***@db" in masked and "bob:***@mlflow" in masked


def test_describe_never_shows_the_password():
    described = storage.describe("postgresql://alice:s3cr3t@db:5432/x")
    assert described == "postgresql://alice@db:5432/x"


def test_embedded_tracking_is_sqlite_under_the_project(tmp_path):
    loc = storage.resolve_tracking(None, tmp_path)
    assert loc.tracking_uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert loc.artifact_location == (tmp_path / "mlartifacts").resolve().as_uri()


def test_file_tracking_store_is_refused(tmp_path):
    with pytest.raises(StorageError, match="no model registry"):
        storage.resolve_tracking("./mlruns", tmp_path)


def test_unwritable_project_dir_is_one_clear_error(tmp_path):
    # Below a regular file nothing can be created, whoever runs the test (root included).
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="is not writable"):
        storage.ensure_project_dir(blocker / "project")
    with pytest.raises(StorageError, match="is not writable"):
        storage.check_writable(blocker / "project")
    assert blocker.read_text() == "x"


def test_passwords_in_a_url_query_are_masked_too():
    text = "postgresql://u@h/db?password=s3cr3t&sslmode=require and http://x/?PWD=abc"
    assert storage.mask(text) == "postgresql://u@h/db?password=***&sslmode=require and http://x/?PWD=***"


def test_a_trials_fail_reason_never_holds_a_password():
    from search.execution import fail_reason

    exc = RuntimeError("could not reach postgresql://team:hunter2@db:5432/x?password=hunter2\nmore")
    assert fail_reason(exc) == "RuntimeError: could not reach postgresql://team:***@db:5432/x?password=***"
