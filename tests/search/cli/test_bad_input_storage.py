"""Bad input about where a search runs: a database that is unreachable, silent, missing or refuses the
password, a study that is not there or is another search, a bad --gpus. One line, exit code 2,
no password printed, and nothing created."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from search_helpers import IN_CI, SLEEP_STUDY, wait_for

# -- bad input: one line, exit code 2, nothing created -------------------------------------------


def _assert_one_line_error(proc: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def _start_args(storage_url: str, study: Path = SLEEP_STUDY, trials: int = 2) -> list[str]:
    return ["start", "--study", str(study), "--trials", str(trials), "--storage", storage_url]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.postgres
def test_refused_database_names_host_and_port_not_the_password(cli, tmp_path, pg_server):
    port = _free_port()
    proc = cli(*_start_args(f"postgresql://root:Hunter2pw@127.0.0.1:{port}/db"), cwd=tmp_path)
    _assert_one_line_error(proc, f"cannot reach PostgreSQL at 127.0.0.1:{port} (connection refused)")
    assert "Hunter2pw" not in proc.stderr + proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
@pytest.mark.slow
def test_silent_database_is_reported_within_the_connect_timeout(cli, tmp_path, pg_server):
    listener = socket.socket()  # accepts TCP, never speaks: a hung or firewalled server
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    started = time.monotonic()
    try:
        proc = cli(*_start_args(f"postgresql://root:Hunter2pw@127.0.0.1:{port}/db"), cwd=tmp_path)
    finally:
        listener.close()
    _assert_one_line_error(proc, f"PostgreSQL at 127.0.0.1:{port} did not answer within 10 s")
    assert time.monotonic() - started < 25  # the 10 s timeout plus starting Python
    assert "Hunter2pw" not in proc.stderr and list(tmp_path.iterdir()) == []


PW_ROLE = "hpsearch_pw_test"
PW_HBA_LINE = f"host all {PW_ROLE} 127.0.0.1/32 scram-sha-256  # added by hpsearch tests, removed after"


@pytest.fixture
def password_role(pg_server: str) -> Iterator[Callable[[str], str]]:
    """A role that must give its password (``right-pw``); yields ``url(password)``.

    The local test server trusts every connection, so the fixture puts ``PW_HBA_LINE`` above the
    trust lines of pg_hba.conf, reloads the server (no restart), and removes the line afterwards.
    """
    import sqlalchemy

    admin = sqlalchemy.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"DROP ROLE IF EXISTS {PW_ROLE}"))
        conn.execute(sqlalchemy.text(f"CREATE ROLE {PW_ROLE} LOGIN PASSWORD 'right-pw'"))
        hba = Path(conn.execute(sqlalchemy.text("SHOW hba_file")).scalar_one())

    def url(password: str) -> str:
        return sqlalchemy.make_url(pg_server).set(username=PW_ROLE, password=password).render_as_string(False)

    added = False
    try:
        if _accepts(url("wrong-pw")):
            if not os.access(hba, os.W_OK):
                (pytest.fail if IN_CI else pytest.skip)(f"the server trusts {PW_ROLE} and {hba} is not writable")
            hba.write_text(PW_HBA_LINE + "\n" + hba.read_text())
            added = True
            _reload(admin)
            wait_for(lambda: not _accepts(url("wrong-pw")), 10, "pg_hba.conf to take effect")
        yield url
    finally:
        if added:
            hba.write_text("".join(line for line in hba.read_text().splitlines(True) if line.strip() != PW_HBA_LINE))
            _reload(admin)
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f"DROP ROLE IF EXISTS {PW_ROLE}"))
        admin.dispose()


def _accepts(url: str) -> bool:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect():
            return True
    except sqlalchemy.exc.OperationalError:
        return False
    finally:
        engine.dispose()


def _reload(admin: Any) -> None:
    import sqlalchemy

    with admin.connect() as conn:
        conn.execute(sqlalchemy.text("SELECT pg_reload_conf()"))


@pytest.mark.postgres
def test_wrong_password_is_one_line_without_the_password(cli, tmp_path, password_role):
    assert _accepts(password_role("right-pw"))
    proc = cli(*_start_args(password_role("Wr0ngPa55")), cwd=tmp_path)
    _assert_one_line_error(proc, f"PostgreSQL at 127.0.0.1:5432 rejected the password for user '{PW_ROLE}'")
    assert "Wr0ngPa55" not in proc.stderr + proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_missing_database_is_named(cli, tmp_path, pg_server):
    url = pg_server.rsplit("/", 1)[0] + "/hpsearch_no_such_db"
    proc = cli(*_start_args(url), cwd=tmp_path)
    _assert_one_line_error(proc, "database 'hpsearch_no_such_db' does not exist on PostgreSQL at 127.0.0.1:5432")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_worker_for_a_study_that_does_not_exist_creates_nothing(cli, tmp_path, pg_url):
    import storage

    proc = cli("worker", "--name", "nope", "--storage", pg_url, cwd=tmp_path)
    _assert_one_line_error(proc, "study 'nope' does not exist in postgresql://root@127.0.0.1:5432/")
    assert not storage.has_optuna_tables(pg_url)  # not even Optuna's tables
    assert list(tmp_path.iterdir()) == []


TWIN = '''"""A one-parameter study called twin: {direction}, x in [-{bound}, {bound}]."""
import torch

import trainer
from studies import Fidelity, StudyData


class Twin:
    name = "twin"
    metric = "val_loss"
    direction = "{direction}"
    search_fidelity = Fidelity(epochs=1)
    full_fidelity = Fidelity(epochs=1)

    def suggest(self, trial):
        return {{"x": trial.suggest_float("x", -{bound}, {bound})}}

    def load_data(self):
        rows = trainer.TensorData(torch.zeros(4, 1), torch.zeros(4))
        return StudyData(train=rows, val=rows, test=rows, task=trainer.Regression())

    def build_model(self, params, data):
        return torch.nn.Linear(1, 1)

    def train_config(self, params, fidelity):
        return trainer.TrainConfig(epochs=fidelity.epochs, batch_size=4)


study = Twin()
'''


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("direction", "bound", "fragment"),
    [
        ("maximize", 1.0, "study 'twin' exists with minimize val_loss, not maximize val_loss; choose another --name"),
        ("minimize", 5.0, "study 'twin' exists with another search space (differs in x); choose another --name"),
    ],
)
@pytest.mark.slow
def test_a_study_that_exists_as_another_search_is_refused(cli, tmp_path, pg_url, direction, bound, fragment):
    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.coordination import Coordinator

    (tmp_path / "first.py").write_text(TWIN.format(direction="minimize", bound=1.0))
    (tmp_path / "second.py").write_text(TWIN.format(direction=direction, bound=bound))
    loc = resolve_locations(storage=pg_url, tracking_uri=None, artifact_location=None,
                            project_dir=tmp_path / ".search")  # fmt: skip
    create_or_resume(loc, prepare(StartOptions(study=str(tmp_path / "first.py"), trials=2)), 2)
    before = sorted(p.name for p in (tmp_path / ".search").iterdir())
    proc = cli(*_start_args(pg_url, tmp_path / "second.py", trials=5), cwd=tmp_path)
    _assert_one_line_error(proc, fragment)
    coordinator = Coordinator(pg_url, "twin")
    assert coordinator.read_record().direction == "minimize" and coordinator.budget() == 2
    assert sorted(p.name for p in (tmp_path / ".search").iterdir()) == before


@pytest.mark.parametrize("command", ["start", "worker"])
@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("0,x", "invalid --gpus value '0,x'; expected all or a comma-separated list like 0,1"),
        ("", "invalid --gpus value ''"),
        ("1,1", "invalid --gpus value '1,1'"),
        ("97", "--gpus 97: no GPU 97 here (GPUs here: "),
    ],
)
def test_invalid_gpus_value_creates_nothing(cli, tmp_path, command, value, fragment):
    args = _start_args(f"sqlite:///{tmp_path}/optuna.db")[1:] if command == "start" else ["--name", "x"]
    proc = cli(command, *args, "--gpus", value, cwd=tmp_path)
    _assert_one_line_error(proc, fragment)
    assert list(tmp_path.iterdir()) == []
