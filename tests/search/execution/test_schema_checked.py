"""A worker whose starter has just opened the storage in full opens it without Optuna's schema checks."""

import subprocess
import sys

import optuna
import pytest
import sqlalchemy

import storage
from search.coordination import Coordinator
from search.execution import _machine

_OPEN = """
import sys
import optuna
import storage
from optuna.storages._rdb import storage as rdb

url, checked = sys.argv[1], sys.argv[2] == "checked"
backend = storage.open_optuna_storage(url, schema_checked=checked)
study = optuna.load_study(study_name="made", storage=backend)
study.tell(study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 0.5)
before = "alembic" in sys.modules
current, head = backend.get_current_version(), backend.get_head_version()  # made on demand if deferred
print(before, current == head, len(study.trials), rdb._VersionManager.__name__, flush=True)
"""


def _mark(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """This process's environment as a worker's whose starter opened ``url`` in full."""
    for name, value in _machine.schema_checked_env(url).items():
        monkeypatch.setenv(name, value)


def _open_in_a_fresh_process(url: str, mode: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _OPEN, url, mode], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def test_a_storage_opened_as_checked_imports_no_alembic_and_still_answers_version_queries(study_url: str) -> None:
    url = study_url
    optuna.create_study(study_name="made", storage=storage.open_optuna_storage(url))  # what the command does
    # In full: Optuna's version bookkeeping (Alembic) as it opens.
    assert _open_in_a_fresh_process(url, "full") == ["True", "True", "1", "_VersionManager"]
    # Checked by the starter: the trial's path needs none of it; a version query makes it then.
    assert _open_in_a_fresh_process(url, "checked") == ["False", "True", "2", "_VersionManager"]


def test_only_a_hand_started_worker_meets_a_schema_of_another_optuna(
    study_url: str, cli, tmp_path, monkeypatch
) -> None:
    """The check a worker skips is the one its starter made: one started otherwise still refuses a
    storage whose schema this Optuna does not know (here stamped with an unknown revision)."""
    url = study_url
    optuna.create_study(study_name="made", storage=storage.open_optuna_storage(url))
    engine = storage.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = 'v9.9.9.a'"))
    engine.dispose()
    with pytest.raises(storage.StorageError, match="no longer compatible with the table schema") as refused:
        Coordinator(url, "made")
    assert "\n" not in str(refused.value)
    done = cli("worker", "--name", "made", "--storage", url, cwd=tmp_path)  # started by hand: one line
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"error: {refused.value}"]
    assert str(refused.value).startswith(f"cannot use database {storage.describe(url)}: ")
    _mark(monkeypatch, url)
    assert _machine.schema_checked(url)
    assert Coordinator(url, "made", _machine.schema_checked(url)).exists()


def test_the_mark_holds_for_the_storage_it_was_made_for_alone(monkeypatch) -> None:
    one, other = "sqlite:////tmp/a/optuna.db", "postgresql+psycopg2://u:secret@db:5432/studies"
    monkeypatch.delenv(_machine.ENV_SCHEMA_CHECKED, raising=False)
    assert not _machine.schema_checked(one)  # a worker started by hand
    _mark(monkeypatch, one)
    assert _machine.schema_checked(one)
    assert not _machine.schema_checked(other)  # pointed elsewhere: checks
    assert "secret" not in _machine.schema_checked_env(other)[_machine.ENV_SCHEMA_CHECKED]


def test_search_start_marks_the_storage_checked_for_the_workers_it_starts(tmp_path, monkeypatch) -> None:
    """Both ways a ``search start`` worker gets its study: the word that releases an early worker, and
    the environment of one started once the study exists (a later or replacement worker)."""
    import io
    import json
    import types

    from search.api import resolve_locations
    from search.execution import _early, _local

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path)
    mark = _machine.schema_checked_env(loc.storage_url)

    class Stdin(io.BytesIO):
        def close(self) -> None:  # keep what was written readable
            pass

    early = types.SimpleNamespace(pid=-4242, stdin=Stdin(), poll=lambda: None)
    monkeypatch.setitem(_early._UNRELEASED, early.pid, 0)
    _early.release_workers([early], "made", loc)  # type: ignore[list-item]
    word, _, rest = early.stdin.getvalue().decode().partition(" ")
    assert word == "go"
    assert json.loads(rest)[2].items() >= mark.items()

    started: dict[str, dict[str, str]] = {}

    def popen(cmd, env, **kwargs):  # records what the worker would start with
        started["env"] = env
        return types.SimpleNamespace(pid=-4243)

    monkeypatch.setattr(_local.subprocess, "Popen", popen)
    _local.spawn_worker(loc, "made", 0, 1, [], False)
    assert started["env"].items() >= mark.items()
