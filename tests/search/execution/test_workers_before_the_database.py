"""Workers as a cluster scheduler starts them: before their study exists, while it is being created,
and while the database is not up yet (an outage to ride out, not bad input)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from search.coordination import PARENT_RUN_ATTR

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = str(ROOT / "benchmarks" / "studies" / "sleep_study.py")
QUICK = ["--study-option", "epoch_seconds=0.3", "--study-option", "epochs=2", "--pruner", "none", "--no-retrain"]


def _worker(args: list[str], cwd: Path, **extra_env: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **extra_env)
    return subprocess.Popen([sys.executable, "-m", "search", "worker", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


@pytest.mark.postgres
@pytest.mark.slow
def test_a_worker_started_before_its_study_waits_for_it_then_trains(cli, tmp_path, pg_url):
    worker = _worker(["--name", "sleep", "--storage", pg_url, "--wait-for-db", "120"], tmp_path)
    time.sleep(4)
    assert worker.poll() is None  # still waiting, not failed
    start = cli("start", "--study", SLEEP_STUDY, "--trials", "3", "--workers", "0", *QUICK, "--storage", pg_url,
                cwd=tmp_path, timeout=240)  # fmt: skip
    out, err = worker.communicate(timeout=120)
    assert start.returncode == 0, start.stdout + start.stderr
    assert worker.returncode == 0, err
    assert err.count("waiting up to 120 s for the study") == 1, err
    assert err.count("study 'sleep' found after") == 1, err
    assert "3/3 trials finished (3 complete" in start.stdout


@pytest.mark.parametrize("wait", ["0", "3"])
@pytest.mark.slow
def test_an_unreachable_database_is_an_outage_and_past_it_the_worker_exits_75(tmp_path, wait):
    """Refused connections at start (a server restarting) are ridden out like an outage, then EX_TEMPFAIL."""
    began = time.monotonic()
    worker = _worker(["--name", "sleep", "--storage", "postgresql://nobody@127.0.0.1:1/none", "--wait-for-db", wait],
                     tmp_path, SEARCH_DB_OUTAGE_LIMIT="2")  # fmt: skip
    _, err = worker.communicate(timeout=120)
    assert worker.returncode == 75, err  # retry later, not "bad configuration"
    assert max(2, float(wait)) <= time.monotonic() - began < 60
    lines = [line for line in err.splitlines() if line.strip()]
    assert "database connection lost while opening the study" in lines[0], err
    assert ("waiting up to 3 s for the study" in err) == (wait == "3"), err
    assert lines[-1].startswith("error: database unreachable for ") and "127.0.0.1:1" in lines[-1], err
    assert "Traceback" not in err


@pytest.mark.postgres
@pytest.mark.slow
def test_a_worker_rides_out_a_database_that_refuses_connections_as_it_starts(tmp_path, pg_url, monkeypatch):
    """As when a worker starts during a PostgreSQL restart ("the database system is shutting down"):
    before it opens the study, and (in-process, at a chosen moment) right after it joined."""
    import sqlalchemy

    start = subprocess.Popen([sys.executable, "-m", "search", "start", "--study", SLEEP_STUDY, "--trials", "2",
                              "--workers", "0", *QUICK, "--storage", pg_url], cwd=tmp_path, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    database = pg_url.rsplit("/", 1)[1]
    admin = sqlalchemy.create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    refuse = f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS '
    try:
        probe = sqlalchemy.create_engine(pg_url)
        deadline = time.monotonic() + 120
        while not _study_created(probe) and time.monotonic() < deadline:  # `search start` then waits for workers
            time.sleep(0.5)
        probe.dispose()
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(refuse + "false"))
        worker = _worker(["--name", "sleep", "--storage", pg_url], tmp_path)
        time.sleep(4)
        assert worker.poll() is None, worker.communicate()  # riding it out, not failed with exit 2
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(refuse + "true"))
        _, err = worker.communicate(timeout=120)
        out, start_err = start.communicate(timeout=120)
    finally:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(refuse + "true"))
        admin.dispose()
        for proc in (start, locals().get("worker")):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert worker.returncode == 0, err
    assert err.count("database connection lost while opening the study") == 1, err
    assert err.count("database connection back") == 1, err
    assert start.returncode == 0, out + start_err
    assert "2/2 trials finished (2 complete" in out
    _connect_across_a_restart(tmp_path, pg_url, monkeypatch)


def _study_created(engine) -> bool:
    import sqlalchemy

    query = sqlalchemy.text("SELECT count(*) FROM study_user_attributes WHERE key = :k")
    try:
        with engine.connect() as conn:
            return bool(conn.execute(query, {"k": PARENT_RUN_ATTR}).scalar())
    except sqlalchemy.exc.ProgrammingError:  # no tables yet
        return False


def _connect_across_a_restart(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server goes away right after a worker joined, as it loads the study: an outage, not exit 1."""
    import sqlalchemy

    from search.api import resolve_locations
    from search.coordination import Coordinator
    from search.execution import connect

    loc = resolve_locations(storage=pg_url, tracking_uri=None, artifact_location=None,
                            project_dir=tmp_path / ".search", create=False)  # fmt: skip
    database = pg_url.rsplit("/", 1)[1]
    admin = sqlalchemy.create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    coordinator = Coordinator(loc.storage_url, "sleep")
    joined = coordinator.join

    def allow(yes: bool) -> None:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(yes).lower()}'))
            if not yes:
                conn.execute(sqlalchemy.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                             "WHERE datname = :d"), {"d": database})  # fmt: skip

    def join_then_restart() -> int:
        ordinal = joined()
        allow(False)
        threading.Timer(3, allow, (True,)).start()
        return ordinal

    monkeypatch.setattr(coordinator, "join", join_then_restart)
    try:
        began = time.monotonic()
        ctx = connect(loc, "sleep", "w-restart", coordinator)
    finally:
        time.sleep(max(0.0, 3.5 - (time.monotonic() - began)))
        allow(True)
        admin.dispose()
    assert time.monotonic() - began >= 3  # it waited for the server, then loaded the study
    assert ctx.optuna_study.study_name == "sleep" and ctx.parent_run_id
    ctx.coordinator.storage.engine.dispose()


def _log_has(path: Path, text: str, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert proc.poll() is None, f"the worker exited {proc.returncode}: {path.read_text()}"
        assert time.monotonic() < deadline, path.read_text()
        time.sleep(0.2)


@pytest.mark.postgres
@pytest.mark.slow
def test_workers_that_find_the_study_half_created_wait_for_its_parent_run_then_join(tmp_path, pg_url):
    """The study is in PostgreSQL, its MLflow parent run not yet (`search start` is still creating it):
    workers started without --wait-for-db wait for it instead of exiting 2, then share the budget."""
    from search.api import StartOptions, prepare, resolve_locations
    from search.coordination import Coordinator
    from search.settings import SearchSettings
    from search.tracking import open_parent_run

    loc = resolve_locations(storage=pg_url, tracking_uri=None, artifact_location=None, project_dir=tmp_path / "p")
    loc.project_dir.mkdir(parents=True, exist_ok=True)
    opts = StartOptions(study=SLEEP_STUDY, trials=3, settings=SearchSettings(pruner="none"),
                        study_options={"epoch_seconds": 0.3, "epochs": 2})  # fmt: skip
    optuna_study, created = Coordinator(pg_url, "sleep").create_or_resume(prepare(opts).record, 3)
    assert created
    workers, logs = [], [tmp_path / f"worker-{i}.log" for i in range(2)]
    for log in logs:
        with log.open("w") as out:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")} | {"PYTHONUNBUFFERED": "1"}
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "search", "worker", "--name", "sleep", "--storage", pg_url,
                 "--project-dir", str(loc.project_dir)], cwd=tmp_path, env=env, stdout=out, stderr=out, text=True,
            ))  # fmt: skip
    for worker, log in zip(workers, logs, strict=True):
        _log_has(log, "waiting up to 120 s for the study: study 'sleep' is still being created", worker)
    open_parent_run(optuna_study, loc, resumed=False, summary={"study": "sleep"})  # `search start`'s last step
    for worker, log in zip(workers, logs, strict=True):
        assert worker.wait(timeout=240) == 0, log.read_text()
        assert log.read_text().count("study 'sleep' found after") == 1, log.read_text()
    states = [t.state.name for t in optuna_study.get_trials(deepcopy=False)]
    assert states == ["COMPLETE"] * 3  # the budget, exactly


@pytest.mark.postgres
@pytest.mark.slow
def test_workers_started_beside_search_start_join_the_study_it_is_creating(cli, tmp_path, pg_url):
    """A Slurm array or Kubernetes Job started beside the `start` job: workers that see the study appear
    in PostgreSQL start at once (no --wait-for-db), with the parent run likely not there yet; all join."""
    import sqlalchemy

    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    start = subprocess.Popen([sys.executable, "-m", "search", "start", "--study", SLEEP_STUDY, "--trials", "4",
                              "--workers", "0", *QUICK, "--storage", pg_url], cwd=tmp_path, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    engine = sqlalchemy.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://", 1))
    deadline = time.monotonic() + 120
    while True:  # the moment the study appears
        with engine.connect() as conn:
            tables = conn.execute(sqlalchemy.text("SELECT to_regclass('studies') IS NOT NULL")).scalar()
            if tables and conn.execute(sqlalchemy.text("SELECT count(*) FROM studies")).scalar():
                break
        assert start.poll() is None and time.monotonic() < deadline, start.communicate()[0]
        time.sleep(0.05)
    engine.dispose()
    workers = [_worker(["--name", "sleep", "--storage", pg_url], tmp_path) for _ in range(3)]
    errs = [w.communicate(timeout=300)[1] for w in workers]
    out, _ = start.communicate(timeout=120)
    for worker, err in zip(workers, errs, strict=True):
        assert worker.returncode == 0, err
        assert "Traceback" not in err
    assert start.returncode == 0, out
    assert "4/4 trials finished (4 complete" in out, out
