"""A worker holds at most 2 connections to the study's database, counted by the server itself.

Each worker connects as a role of its own whose ``CONNECTION LIMIT`` is 2: PostgreSQL refuses that
role a third backend however briefly it would have been held ("too many connections for role"), so
a worker that ever needs 3 at once fails a claim, a heartbeat or a trial, or logs the refusal while
it rides it out. Two such workers share the study (the lock contended, heartbeats beating and
reaping beside the pruner's reports), the follower (a superuser, not limited) alongside.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy
from search_helpers import FAST, SLEEP_STUDY, assert_exact_budget, spawn, stop, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LIMIT = 2


def _as_role(url: str, role: str) -> str:
    return sqlalchemy.engine.make_url(url).set(username=role, password=None).render_as_string(hide_password=False)


def _has_parent_run(db: sqlalchemy.Engine) -> bool:
    query = "SELECT count(*) FROM study_user_attributes WHERE key = 'hpsearch.mlflow_parent_run_id'"
    try:
        with db.connect() as conn:
            return bool(conn.execute(sqlalchemy.text(query)).scalar_one())
    except sqlalchemy.exc.ProgrammingError:  # no tables yet
        return False


def test_each_worker_holds_at_most_two_connections(pg_server, pg_url, tmp_path):
    import storage

    roles = [f"hp_worker_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    admin = sqlalchemy.create_engine(pg_server, isolation_level="AUTOCOMMIT", poolclass=sqlalchemy.NullPool)
    with admin.connect() as conn:
        for role in roles:
            conn.execute(sqlalchemy.text(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT {LIMIT}'))
    db = sqlalchemy.create_engine(pg_url, isolation_level="AUTOCOMMIT", poolclass=sqlalchemy.NullPool)
    project, logs = tmp_path / "project", tmp_path / "logs"
    logs.mkdir()
    where = ["--project-dir", str(project)]
    study = ["--study-option", "epochs=4", "--study-option", "epoch_seconds=0.3", *FAST]
    follower = spawn(["start", "--study", str(SLEEP_STUDY), "--name", "limited", "--trials", "6", "--workers", "0",
                      "--storage", pg_url, *study, *where], tmp_path, logs / "start.log")  # fmt: skip
    workers = []
    try:
        wait_for(lambda: _has_parent_run(db) or follower.poll() is not None, 180, "the study and its parent run")
        assert follower.poll() is None, (logs / "start.log").read_text()
        with db.connect() as conn:
            for role in roles:
                conn.execute(sqlalchemy.text(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"'))
                conn.execute(sqlalchemy.text(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"'))
        workers = [spawn(["worker", "--name", "limited", "--storage", _as_role(pg_url, role), *where], tmp_path,
                         logs / f"{role}.log") for role in roles]  # fmt: skip
        codes = [worker.wait(timeout=300) for worker in workers]
        assert follower.wait(timeout=120) == 0, (logs / "start.log").read_text()
    finally:
        stop(follower, *workers)
        with db.connect() as conn:  # the grants live in the study's database
            for role in roles:
                conn.execute(sqlalchemy.text(f'DROP OWNED BY "{role}"'))
        db.dispose()
        with admin.connect() as conn:
            for role in roles:
                conn.execute(sqlalchemy.text(f'DROP ROLE "{role}"'))
        admin.dispose()
    outputs = [(logs / f"{role}.log").read_text() for role in roles]
    for code, out in zip(codes, outputs, strict=True):
        assert code == 0, out[-3000:]
        assert "too many connections" not in out, out[-3000:]
    backend = storage.open_optuna_storage(pg_url)
    trials = backend.get_all_trials(backend.get_study_id_from_name("limited"))
    backend.engine.dispose()
    assert_exact_budget(trials, 6)
    assert all(t.state.name == "COMPLETE" for t in trials)
    ran = {t.user_attrs.get("worker", "").split(":")[1] for t in trials}
    assert len(ran) == 2, "both limited workers ran trials"
