"""Running ``search`` in the background against the real PostgreSQL server, and reading what it did.

Shared by the fault-tolerance tests (workers that die, stopped searches, database outages, trials
that go wrong, bad input). ``tests/search/conftest.py`` puts this folder on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from search.observation import continued_attempts, paused_now  # noqa: F401 - the tests import paused_now here

ROOT = Path(__file__).resolve().parents[2]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"
FAULTY_STUDY = Path(__file__).resolve().parent / "data" / "faulty_study.py"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
GRACE_S = 3
FAST = [
    "--heartbeat-interval",
    "1",
    "--grace-period",
    str(GRACE_S),
    "--pruner",
    "none",
    "--no-retrain",
    "--checkpoint-every",
    "0",
    "--patience",
    "off",
]  # every epoch: these trials are seconds long, and they test resuming; each trains every epoch


# -- running `search` in the background --------------------------------------------------------


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env


def spawn(args: list[str], cwd: Path, log: Path, **popen: Any) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "search", *args], cwd=cwd, env=clean_env(), stdout=out,
                                stderr=subprocess.STDOUT, **popen)  # fmt: skip


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    """A fresh database, dropped afterwards (pre-pinged, so it survives a server restart)."""
    import sqlalchemy

    name = f"hpsearch_ft_{uuid.uuid4().hex[:10]}"
    admin = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
            conn.execute(sqlalchemy.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n AND pid <> pg_backend_pid()"
            ), {"n": name})  # fmt: skip
            conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


def study_ready(url: str, name: str) -> bool:
    """Whether study ``name`` at ``url`` is ready for workers: its MLflow parent run, the last part
    ``search start`` creates, is recorded. Reads SQL directly, so creates nothing."""
    import sqlalchemy

    import storage

    if not storage.has_optuna_tables(url):
        return False
    engine = storage.create_engine(url)
    try:
        with engine.connect() as conn:
            # Optuna creates its tables one by one: "studies" may stand before the others do.
            if not sqlalchemy.inspect(conn).has_table("study_user_attributes"):
                return False
            query = sqlalchemy.text(
                "SELECT count(*) FROM studies s JOIN study_user_attributes a ON a.study_id = s.study_id "
                "WHERE s.study_name = :n AND a.key = 'hpsearch.mlflow_parent_run_id'"
            )
            return bool(conn.execute(query, {"n": name}).scalar())
    finally:
        engine.dispose()


class StudyWatch:
    """Reads a study that a background ``search start`` creates, once it is ready for workers."""

    def __init__(self, url: str, name: str, timeout: float = 90) -> None:
        import storage

        self.name = name
        wait_for(lambda: study_ready(url, name), timeout, f"study {name!r} to be created")
        self.storage = storage.open_optuna_storage(url)
        self.study_id = self.storage.get_study_id_from_name(name)

    def trials(self) -> list[Any]:
        return self.storage.get_all_trials(self.study_id)

    def trial(self, number: int) -> Any:
        return next(t for t in self.trials() if t.number == number)

    def running_at(self, epoch: int, with_run: bool = False) -> Any:
        """A RUNNING first attempt (not a retry, which inherits reports) that has reported ``epoch``
        (and, ``with_run``, recorded its MLflow run: a worker's first run waits for MLflow's import)."""
        for t in self.trials():
            fresh = "failed_trial" not in t.system_attrs
            if fresh and t.state.name == "RUNNING" and max(t.intermediate_values, default=0) >= epoch \
                    and (not with_run or "mlflow_run_id" in t.user_attrs):  # fmt: skip
                return t
        return None


def start_losing_a_worker(args: list[str], url: str, name: str, cwd: Path) -> tuple[Any, StudyWatch]:
    """``search start ARGS --name NAME --storage URL`` in ``cwd`` (its log: ``cwd/start.log``), whose
    worker running the first trial to reach epoch 1 is SIGKILLed; waits for it to end, successfully.
    Returns that trial as it ran, and a watch on the study.

    The worker is frozen (SIGSTOP) before it is killed, and killed only if its trial is still RUNNING
    once frozen: a trial that finished between the read and the signal would leave nothing to retry."""
    import psutil

    start = spawn(["start", *args, "--name", name, "--storage", url], cwd, cwd / "start.log")
    try:
        watch = StudyWatch(url, name)
        deadline = time.monotonic() + 120
        while True:
            left = deadline - time.monotonic()
            running = wait_for(lambda: watch.running_at(1), max(left, 1), "a trial to reach epoch 1")
            pid = int(running.user_attrs["worker"].split(":")[1])
            [victim] = [p for p in psutil.Process(start.pid).children() if p.pid == pid]
            if frozen_while_running(watch, running.number, pid):
                victim.kill()
                break
            assert time.monotonic() < deadline, "no trial stayed RUNNING long enough to be killed"
        assert start.wait(timeout=240) == 0, (cwd / "start.log").read_text()
    finally:
        stop(start)
    return running, watch


def frozen_while_running(watch: StudyWatch, number: int, pid: int, settle: float = 0.0) -> bool:
    """Stop process ``pid`` (SIGSTOP) and say whether trial ``number`` still runs once it is stopped,
    ``settle`` seconds later (a write it sent just before the signal lands meanwhile). If the trial
    finished in between, the process is woken again (SIGCONT) and False returned: look for another."""
    import signal

    os.kill(pid, signal.SIGSTOP)
    time.sleep(settle)
    if watch.trial(number).state.name == "RUNNING":
        return True
    os.kill(pid, signal.SIGCONT)
    return False


def logical(trial: Any) -> int:
    return int(trial.system_attrs.get("failed_trial", trial.number))


def assert_exact_budget(trials: list[Any], budget: int) -> None:
    """Every logical trial finished exactly once: none left RUNNING or WAITING, none counted twice."""
    assert [t.number for t in trials if t.state.name in ("RUNNING", "WAITING")] == []
    attempts: dict[int, list[Any]] = defaultdict(list)
    for trial in trials:
        attempts[logical(trial)].append(trial)
    assert len(attempts) == budget, sorted(attempts)
    for number, tries in attempts.items():
        assert sum(t.state.name in ("COMPLETE", "PRUNED") for t in tries) <= 1, f"trial {number} finished twice"


def newest_epoch(ckpt_dir: Path) -> int:
    return max(int(p.stem.removeprefix("epoch-")) for p in ckpt_dir.glob("epoch-*.pt"))


def mlflow_runs(project: Path) -> dict[str, Any]:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return {r.info.run_id: r for r in client.search_runs(experiments, max_results=500)}


def parent_summary(project: Path, study: str) -> dict[str, Any]:
    """The ``study_summary.json`` the study's MLflow parent run keeps, in ``project``'s embedded store."""
    import json

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    experiment = client.get_experiment_by_name(study).experiment_id
    [parent] = client.search_runs([experiment], filter_string="tags.`hpsearch.role` = 'study'")
    return json.loads(Path(client.download_artifacts(parent.info.run_id, "study_summary.json", str(project)))
                      .read_text())  # fmt: skip


# -- a worker frozen inside the study lock ---------------------------------------------------------

LOCK_GRACE_S = 5  # the lock's hold time follows the grace period (never under storage._lock.MIN_HOLD_S)

# A worker's claim that stops itself right after counting, inside the lock, and says what it got once
# it is woken: ``python -c FROZEN_CLAIM URL NAME`` prints "frozen", stops, then "claimed N" (or None).
FROZEN_CLAIM = textwrap.dedent(
    """
    import os, signal, sys
    import storage
    from search.coordination import Coordinator

    counted = storage.claim_counts
    def count_then_freeze(*args, **kwargs):
        result = counted(*args, **kwargs)
        if not os.environ.get("THAWED"):
            os.environ["THAWED"] = "1"
            print("frozen", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        return result
    storage.claim_counts = count_then_freeze

    coordinator = Coordinator(sys.argv[1], sys.argv[2])
    study = coordinator.load()
    trial, counts = coordinator.claim(study)
    print("claimed", None if trial is None else trial.number, flush=True)
    """
)


def sleep_study_coordinator(url: str, name: str, trials: int) -> tuple[Any, Any]:
    """A sleep study of ``trials`` created in ``url`` with a grace period of ``LOCK_GRACE_S``, and its
    coordinator: ``(coordinator, optuna study)``."""
    from search.api import StartOptions, prepare
    from search.coordination import Coordinator
    from search.settings import SearchSettings

    settings = SearchSettings(heartbeat_interval=1, grace_period=LOCK_GRACE_S)
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=trials, settings=settings)).record
    coordinator = Coordinator(url, name)
    study, _ = coordinator.create_or_resume(record, trials)
    return coordinator, study


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP): state ``T`` in ``/proc/PID/stat``."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


# -- freeze-thaw: a logical trial is a chain of attempts ------------------------------------------


def final_attempts(trials: list[Any]) -> dict[int, list[Any]]:
    """Logical trial number -> its final attempts (those no later attempt continues, stood-down
    retries aside): exactly one per logical trial when the budget is exact."""
    continued = continued_attempts(trials)
    out: dict[int, list[Any]] = defaultdict(list)
    for trial in trials:
        out.setdefault(logical(trial), [])
        if trial.number not in continued and not str(trial.user_attrs.get("fail_reason", "")).startswith("not needed"):
            out[logical(trial)].append(trial)
    return out


def assert_exact_logical_budget(trials: list[Any], budget: int) -> None:
    """``assert_exact_budget`` for studies whose trials pause and resume (freeze-thaw): none left
    RUNNING or WAITING, ``budget`` logical trials, each ending in exactly one final attempt that is
    COMPLETE or PRUNED; a COMPLETE attempt is never continued, and a continued PRUNED one paused."""
    assert [t.number for t in trials if t.state.name in ("RUNNING", "WAITING")] == []
    finals = final_attempts(trials)
    assert len(finals) == budget, sorted(finals)
    for number, ends in finals.items():
        assert len(ends) == 1, f"trial {number} ended {len(ends)} times: {[(t.number, t.state.name) for t in ends]}"
        assert ends[0].state.name in ("COMPLETE", "PRUNED"), f"trial {number} ended {ends[0].state.name}"
    continued = continued_attempts(trials)
    for trial in trials:
        if trial.number in continued:
            assert trial.state.name != "COMPLETE", f"trial {trial.number} completed and was continued (finished twice)"
            if trial.state.name == "PRUNED":
                assert "paused_at" in trial.user_attrs, f"pruned trial {trial.number} was continued"
