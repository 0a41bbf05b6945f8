"""Fault tolerance: workers that die, a database that goes away, trials that go wrong, bad input.

The scenarios run ``search`` as users do, in subprocesses against the real PostgreSQL server, with
the training-free sleep study (``benchmarks/studies/sleep_study.py``: every epoch sleeps), so a
trial's length is known and a worker can be killed at a chosen epoch. Heartbeats every second and
a grace period of 3 s keep the waits short.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"
FAULTY_STUDY = Path(__file__).resolve().parents[1] / "data" / "faulty_study.py"
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


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env


def _spawn(args: list[str], cwd: Path, log: Path, **popen: Any) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "search", *args], cwd=cwd, env=_env(), stdout=out,
                                stderr=subprocess.STDOUT, **popen)  # fmt: skip


def _wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _database(admin_url: str) -> Iterator[str]:
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


class StudyWatch:
    """Reads a study that a background ``search start`` creates, once it is ready for workers."""

    def __init__(self, url: str, name: str, timeout: float = 90) -> None:
        import storage

        self.name = name
        _wait_for(lambda: self._ready(url), timeout, f"study {name!r} to be created")
        self.storage = storage.open_optuna_storage(url)
        self.study_id = self.storage.get_study_id_from_name(name)

    def _ready(self, url: str) -> bool:
        import sqlalchemy

        import storage

        if not storage.has_optuna_tables(url):
            return False
        engine = storage.create_engine(url)
        try:
            with engine.connect() as conn:
                # Workers need the study's MLflow parent run, its last part to be created.
                query = sqlalchemy.text(
                    "SELECT count(*) FROM studies s JOIN study_user_attributes a ON a.study_id = s.study_id "
                    "WHERE s.study_name = :n AND a.key = 'hpsearch.mlflow_parent_run_id'"
                )
                return bool(conn.execute(query, {"n": self.name}).scalar())
        finally:
            engine.dispose()

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


# -- a worker dies ------------------------------------------------------------------------------


@dataclass
class KilledStudy:
    """What happened to a 2-trial study whose worker was SIGKILLed mid-trial, twice."""

    trials: list[Any]
    first_dead: int
    first_checkpoint: int
    """Newest epoch checkpoint of the first dead attempt."""
    reaped_after_s: float
    waiting_before_any_worker: list[Any]
    second_dead: int
    second_checkpoint: int
    """Newest checkpoint of the second dead attempt, truncated before its retry started."""
    follower_code: int
    last_worker_log: str
    project: Path


@pytest.fixture(scope="module")
def killed_study(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KilledStudy]:
    """``search start --workers 0`` follows a study while workers are started and SIGKILLed by hand.

    Worker A is killed in trial 0's epoch 3; with no worker alive, the follower must fail the trial
    and queue its retry. Worker B resumes the retry, finishes it, starts trial 1 and is killed in
    its epoch 3; its newest checkpoint is then truncated. Worker C must fall back to the previous
    checkpoint and finish the study.
    """
    work = tmp_path_factory.mktemp("killed")
    project, logs = work / "project", work / "logs"
    logs.mkdir()
    with _database(pg_server) as url:
        where = ["--storage", url, "--project-dir", str(project)]
        follower = _spawn(["start", "--study", str(SLEEP_STUDY), "--name", "killed", "--trials", "2", "--workers", "0",
                           *FAST, "--study-option", "epochs=8", "--study-option", "epoch_seconds=0.6", *where],
                          work, logs / "start.log")  # fmt: skip
        workers: list[subprocess.Popen[bytes]] = []

        def worker(tag: str) -> subprocess.Popen[bytes]:
            workers.append(_spawn(["worker", "--name", "killed", *where], work, logs / f"worker-{tag}.log"))
            return workers[-1]

        try:
            watch = StudyWatch(url, "killed")
            a = worker("a")
            # Runs of dead attempts are tested below: each is killed once its run exists.
            first = _wait_for(lambda: watch.running_at(3, with_run=True), 120, "trial 0 to reach epoch 3")
            _stop(a)
            killed_at = time.monotonic()
            first_ckpt = newest_epoch(project / "checkpoints" / "killed" / f"trial-{first.number}")
            _wait_for(lambda: watch.trial(first.number).state.name == "FAIL", 30, "the dead trial to be failed")
            reaped_after = time.monotonic() - killed_at
            waiting = [t for t in watch.trials() if t.state.name == "WAITING"]

            b = worker("b")
            second = _wait_for(lambda: watch.running_at(3, with_run=True), 120, "the second trial to reach epoch 3")
            _stop(b)
            second_dir = project / "checkpoints" / "killed" / f"trial-{logical(second)}"
            second_ckpt = newest_epoch(second_dir)
            damaged = second_dir / f"epoch-{second_ckpt:04d}.pt"
            with open(damaged, "r+b") as file:
                file.truncate(damaged.stat().st_size // 2)
            c = worker("c")
            code = follower.wait(timeout=180)
            c.wait(timeout=60)
            yield KilledStudy(
                trials=watch.trials(), first_dead=first.number, first_checkpoint=first_ckpt,
                reaped_after_s=reaped_after, waiting_before_any_worker=waiting, second_dead=second.number,
                second_checkpoint=second_ckpt, follower_code=code, last_worker_log=(logs / "worker-c.log").read_text(),
                project=project,
            )  # fmt: skip
        finally:
            _stop(follower, *workers)


def _retry_of(study: KilledStudy, number: int) -> Any:
    return next(t for t in study.trials if t.system_attrs.get("failed_trial") == number and t.state.name != "FAIL")


@pytest.mark.postgres
@pytest.mark.slow
def test_the_follower_fails_a_dead_trial_within_the_grace_period(killed_study):
    # No worker was alive: the process following the study reaped it, not a worker asking for work.
    assert killed_study.reaped_after_s < GRACE_S + 5
    dead = next(t for t in killed_study.trials if t.number == killed_study.first_dead)
    assert dead.user_attrs["fail_reason"].startswith("worker lost")
    [waiting] = killed_study.waiting_before_any_worker
    assert waiting.system_attrs["failed_trial"] == dead.number
    assert waiting.params == dead.params


@pytest.mark.postgres
@pytest.mark.slow
def test_the_retry_resumes_after_the_last_checkpoint_and_continues_the_curve(killed_study):
    retry = _retry_of(killed_study, killed_study.first_dead)
    assert retry.state.name == "COMPLETE"
    assert killed_study.first_checkpoint >= 3
    assert retry.user_attrs["resumed_from_epoch"] == killed_study.first_checkpoint
    # The pruner sees one curve: the dead attempt's reports carried over, the retry's follow them.
    # (An attempt killed between writing a checkpoint and reporting its epoch leaves that one out.)
    assert set(range(1, 9)) - {killed_study.first_checkpoint} <= set(retry.intermediate_values)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_truncated_checkpoint_falls_back_to_the_previous_one_with_a_warning(killed_study):
    retry = _retry_of(killed_study, killed_study.second_dead)
    assert retry.state.name == "COMPLETE"
    assert retry.user_attrs["resumed_from_epoch"] == killed_study.second_checkpoint - 1
    assert "skipping checkpoint" in killed_study.last_worker_log
    assert f"epoch-{killed_study.second_checkpoint:04d}.pt is truncated or corrupt" in killed_study.last_worker_log


@pytest.mark.postgres
@pytest.mark.slow
def test_dead_attempts_end_killed_in_mlflow_and_their_retries_link_to_them(killed_study):
    runs = mlflow_runs(killed_study.project)
    for dead_number in (killed_study.first_dead, killed_study.second_dead):
        dead = next(t for t in killed_study.trials if t.number == dead_number)
        retry = _retry_of(killed_study, dead_number)
        dead_run, retry_run = runs[dead.user_attrs["mlflow_run_id"]], runs[retry.user_attrs["mlflow_run_id"]]
        assert dead_run.info.status == "KILLED"
        assert retry_run.info.status == "FINISHED"
        assert retry_run.data.tags["hpsearch.retry_of"] == dead_run.info.run_id


@pytest.mark.postgres
@pytest.mark.slow
def test_killed_workers_cost_no_trial_and_leave_nothing_running(killed_study):
    assert killed_study.follower_code == 0
    assert_exact_budget(killed_study.trials, 2)
    failed = [t for t in killed_study.trials if t.state.name == "FAIL"]
    assert sorted(t.number for t in failed) == sorted([killed_study.first_dead, killed_study.second_dead])


def test_a_running_trial_heartbeat_reaps_dead_trials(tmp_path):
    """While every live worker is busy training, its heartbeat thread still fails dead trials."""
    from search.api import StartOptions, prepare
    from search.coordination import Coordinator, keep_alive
    from search.settings import SearchSettings

    record = prepare(
        StartOptions(study=str(SLEEP_STUDY), trials=3, settings=SearchSettings(heartbeat_interval=1, grace_period=2))
    ).record
    coordinator = Coordinator(f"sqlite:///{tmp_path}/optuna.db", "reap")
    study, _ = coordinator.create_or_resume(record, 3)
    dead, _ = coordinator.claim(study)
    dead.suggest_float("x", -2.0, 2.0)
    dead.report(0.5, 1)
    time.sleep(3.0)  # no heartbeat for longer than the grace period
    live = study.ask()  # not claimed: a claim would reap the dead trial itself
    coordinator.storage.record_heartbeat(live._trial_id)
    stop = threading.Event()
    beating = threading.Thread(target=keep_alive, args=(coordinator, study, live, stop))
    beating.start()
    try:
        _wait_for(lambda: coordinator.storage.get_trial(dead._trial_id).state.name == "FAIL", 10, "the reap")
        coordinator.reap(study)  # a second reaper finds nothing more to do
    finally:
        stop.set()
        beating.join()
    trials = study.get_trials(deepcopy=False)
    [retry] = [t for t in trials if t.state.name == "WAITING"]
    assert retry.system_attrs["failed_trial"] == dead.number
    assert retry.params == {"x": dead.params["x"]} and retry.intermediate_values == {1: 0.5}
    assert coordinator.storage.get_trial(live._trial_id).state.name == "RUNNING"


@pytest.mark.parametrize(("every", "resumed"), [(0, 3), (30, 0)], ids=["every-epoch", "every-30s"])
def test_a_retry_resumed_after_the_last_epoch_completes_with_the_best_reported_value(claimed_sleep_trial, every,
                                                                                     resumed):  # fmt: skip
    """A worker that died after its trial's last epoch, before telling. With a checkpoint every epoch
    the retry resumes after the last one and trains nothing; with 30 s between checkpoints none was
    due in a trial this short (its last epoch is saved only when due, since a finished trial's
    checkpoints are deleted unread), so the retry trains it again: a loss within the bound."""
    from search.execution._pruning import PruningHook
    from search.execution._trial import _fit, run_trial
    from search.settings import SearchSettings

    settings = SearchSettings(heartbeat_interval=1, grace_period=2, pruner="none", checkpoint_every=every)
    ctx, dead = claimed_sleep_trial(settings)
    run = ctx.tracker.start_child(ctx.experiment_id, ctx.parent_run_id, "dead", "trial", {})
    dead.set_user_attr("mlflow_run_id", run.run_id)
    hook = PruningHook(dead, "val_loss", ctx.pruner_trials)
    _fit(ctx, dead, run, ctx.checkpoint_root / "sleep" / f"trial-{dead.number}", hook)  # all 3 epochs, then "dies"
    reported = ctx.coordinator.storage.get_trial(dead._trial_id).intermediate_values
    time.sleep(3.0)
    [reaped] = ctx.coordinator.reap(ctx.optuna_study)
    retry, _ = ctx.coordinator.claim(ctx.optuna_study)
    outcome = run_trial(ctx, retry)
    finished = ctx.coordinator.storage.get_trial(retry._trial_id)
    assert reaped.number == dead.number and finished.system_attrs["failed_trial"] == dead.number
    assert finished.user_attrs["resumed_from_epoch"] == resumed
    if resumed:  # its values were stored with the checkpoint that holds them
        assert sorted(reported) == [1, 2, 3] and finished.value == min(reported.values())
    else:  # nothing was stored: the dead attempt's values came with no checkpoint, nor a tell
        assert reported == {} and finished.user_attrs["epochs_run"] == 3
    assert outcome.state == "COMPLETE" and finished.value == min(finished.intermediate_values.values())


# -- Ctrl-C ---------------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.slow
def test_ctrl_c_leaves_nothing_running_and_the_same_command_resumes(pg_url, tmp_path, cli):
    args = ["start", "--study", str(SLEEP_STUDY), "--name", "ctrlc", "--trials", "3", "--workers", "2", *FAST,
            "--study-option", "epochs=6", "--study-option", "epoch_seconds=0.6", "--storage", pg_url]  # fmt: skip
    # A terminal's Ctrl-C reaches every process of the foreground group: `search start` and its workers.
    start = _spawn(args, tmp_path, tmp_path / "start.log", start_new_session=True)
    try:
        watch = StudyWatch(pg_url, "ctrlc")
        advanced = _wait_for(lambda: watch.running_at(2), 120, "a trial to reach epoch 2")
        os.killpg(start.pid, signal.SIGINT)
        assert start.wait(timeout=90) == 130
    finally:
        _stop(start)
    interrupted = [t for t in watch.trials() if t.state.name == "FAIL"]
    assert interrupted and all(t.user_attrs["fail_reason"] == "interrupted" for t in interrupted)
    assert [t.number for t in watch.trials() if t.state.name == "RUNNING"] == []
    again = cli(*args, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = watch.trials()
    assert_exact_budget(trials, 3)
    [resumed] = [t for t in trials if t.system_attrs.get("failed_trial") == advanced.number]
    assert resumed.state.name == "COMPLETE" and resumed.user_attrs["resumed_from_epoch"] >= 2


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_stops_search_start_and_every_process_it_started(pg_url, tmp_path, cli, signum, code):
    """What a scheduler, systemd or `docker stop` sends, to `search start` alone: its workers stop as
    for Ctrl-C (their trials queued again), none of its processes outlives it, and it exits 128+N."""
    import psutil

    name = f"stopped-{signum.name.lower()}"
    args = ["start", "--study", str(SLEEP_STUDY), "--name", name, "--trials", "3", "--workers", "2", *FAST,
            "--study-option", "epochs=6", "--study-option", "epoch_seconds=0.6", "--storage", pg_url]  # fmt: skip
    start = _spawn(args, tmp_path, tmp_path / "start.log")
    tree: list[Any] = []
    try:
        watch = StudyWatch(pg_url, name)
        _wait_for(lambda: watch.running_at(1), 120, "a trial to reach epoch 1")
        tree = psutil.Process(start.pid).children(recursive=True)
        assert len(tree) >= 2, tree
        start.send_signal(signum)
        assert start.wait(timeout=90) == code, (tmp_path / "start.log").read_text()
        time.sleep(0.5)
        left = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], f"processes of `search start` still running after it exited: {left}"
    finally:
        _stop(start)
        for proc in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
    assert "interrupted: running trials were stopped" in (tmp_path / "start.log").read_text()
    trials = watch.trials()
    assert [t.number for t in trials if t.state.name == "RUNNING"] == []
    interrupted = [t for t in trials if t.state.name == "FAIL"]
    assert interrupted and all(t.user_attrs["fail_reason"] == "interrupted" for t in interrupted)
    assert [t for t in trials if t.state.name == "WAITING"], "the stopped trials' retries were not queued"
    if signum == signal.SIGTERM:  # the same command resumes and spends the budget exactly
        again = cli(*args, cwd=tmp_path, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert_exact_budget(watch.trials(), 3)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_sigkilled_local_worker_is_replaced_while_a_worker_elsewhere_trains_the_study(pg_url, tmp_path):
    """The OOM killer takes `search start`'s only local worker while another node's worker trains:
    a fresh local worker takes its place (not exit 2, "bad input"), and the study ends with its budget."""
    import psutil

    project = tmp_path / "project"
    where = ["--storage", pg_url, "--project-dir", str(project)]
    start = _spawn(["start", "--study", str(SLEEP_STUDY), "--name", "oom", "--trials", "4", "--workers", "1", *FAST,
                    "--study-option", "epochs=5", "--study-option", "epoch_seconds=0.5", *where], tmp_path,
                   tmp_path / "start.log")  # fmt: skip
    elsewhere = None
    try:
        watch = StudyWatch(pg_url, "oom")
        elsewhere = _spawn(["worker", "--name", "oom", *where], tmp_path, tmp_path / "elsewhere.log")
        [local] = psutil.Process(start.pid).children()

        def local_running() -> Any:
            return next((t for t in watch.trials() if t.state.name == "RUNNING"
                         and f":{local.pid}:" in t.user_attrs.get("worker", "")), None)  # fmt: skip

        _wait_for(local_running, 120, "the local worker to run a trial")
        local.kill()
        assert start.wait(timeout=240) == 0, (tmp_path / "start.log").read_text()
        assert elsewhere.wait(timeout=60) == 0
    finally:
        _stop(start, *([elsewhere] if elsewhere else []))
    log = (tmp_path / "start.log").read_text()
    assert "worker 0 died (killed by SIGKILL) with the study unfinished; starting a fresh one (1 of 3 in a row)" in log
    assert_exact_budget(watch.trials(), 4)


def test_local_workers_that_keep_dying_end_search_start_with_a_fault_not_bad_input(cli, tmp_path):
    """Every local worker is SIGKILLed as it loads the study (a crash loop): after 3 fresh ones in a
    row, and nobody else training the study, `search start` exits 70 with one line, not 2."""
    study = tmp_path / "killed.py"
    study.write_text(SLEEP_STUDY.read_text() + '\nimport os, signal, sys\nif "worker" in sys.argv:\n'
                     "    os.kill(os.getpid(), signal.SIGKILL)\n")  # fmt: skip
    proc = cli("start", "--study", str(study), "--trials", "2", "--workers", "1", *FAST, cwd=tmp_path, timeout=300)
    assert proc.returncode == 70, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "all 1 local workers failed (killed by SIGKILL)" in errors[0], proc.stderr
    assert "no worker trains the study" in errors[0] and "Traceback" not in proc.stderr
    assert proc.stderr.count("starting a fresh one") == 3, proc.stderr
    assert "not starting it again" in proc.stderr


# -- the database goes away ----------------------------------------------------------------------


@pytest.fixture
def restart_postgres(pg_server: str) -> Iterator[Callable[[], None]]:
    """Restarts the local server on demand; it is running again afterwards, whatever happened."""
    clusters = Path("/etc/postgresql")
    if shutil.which("pg_ctlcluster") is None or not clusters.is_dir():
        reason = "needs the local PostgreSQL cluster (pg_ctlcluster) to restart it"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", sorted(p.name for p in clusters.iterdir())[-1], "main"]

    def restart(down_seconds: float = 3.0) -> None:
        # Down for longer than a heartbeat and an epoch, so every worker meets the outage:
        # a restart quicker than that can pass unseen behind the pool's pre-ping.
        subprocess.run([*command, "stop", "-m", "fast"], check=True, timeout=120, capture_output=True)
        time.sleep(down_seconds)
        subprocess.run([*command, "start"], check=True, timeout=120, capture_output=True)

    try:
        yield restart
    finally:
        status = subprocess.run([*command, "status"], capture_output=True, timeout=30)
        if status.returncode != 0:
            subprocess.run([*command, "start"], check=True, timeout=120, capture_output=True)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_postgres_restart_mid_study_costs_nothing(pg_server, restart_postgres, tmp_path):
    with _database(pg_server) as url:
        args = ["start", "--study", str(SLEEP_STUDY), "--name", "restart", "--trials", "8", "--workers", "2", *FAST,
                "--study-option", "epochs=4", "--study-option", "epoch_seconds=0.5", "--storage", url]  # fmt: skip
        start = _spawn(args, tmp_path, tmp_path / "start.log")
        try:
            watch = StudyWatch(url, "restart")
            _wait_for(lambda: watch.running_at(1) and any(t.state.name == "COMPLETE" for t in watch.trials()),
                      120, "a finished trial and a running one")  # fmt: skip
            restart_postgres()
            code = start.wait(timeout=240)
        finally:
            _stop(start)
        trials = watch.trials()
        watch.storage.engine.dispose()
    output = (tmp_path / "start.log").read_text()
    assert code == 0, output
    assert_exact_budget(trials, 8)
    # Sleep trials cannot fail by themselves: any FAIL would be an attempt the outage cost.
    assert sorted(t.state.name for t in trials) == ["COMPLETE"] * 8, [(t.number, t.state.name) for t in trials]
    worker_logs = [p.read_text() for p in (tmp_path / ".search" / "logs").glob("worker-*.log")]
    lost = [log.count("database connection lost") for log in worker_logs]
    back = [log.count("database connection back") for log in worker_logs]
    assert all(n >= 1 for n in lost) and lost == back, (lost, back)
    assert all(n <= 2 for n in lost), lost  # one line when it goes, one when it is back, per outage
    assert all("Traceback" not in log for log in worker_logs)


@pytest.mark.postgres
@pytest.mark.slow
def test_past_the_outage_limit_workers_exit_with_one_clear_line(pg_url, tmp_path):
    import sqlalchemy

    database = pg_url.rsplit("/", 1)[1]
    args = ["start", "--study", str(SLEEP_STUDY), "--name", "outage", "--trials", "2", "--workers", "1", *FAST,
            "--study-option", "epochs=40", "--study-option", "epoch_seconds=0.5", "--db-outage-limit", "4",
            "--storage", pg_url]  # fmt: skip
    start = subprocess.Popen([sys.executable, "-m", "search", *args], cwd=tmp_path, env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    admin = sqlalchemy.create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    try:
        watch = StudyWatch(pg_url, "outage")
        _wait_for(lambda: watch.running_at(1), 120, "a trial to reach epoch 1")
        watch.storage.engine.dispose()
        with admin.connect() as conn:  # the database goes away for good: refused, and cut off
            conn.execute(sqlalchemy.text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
            conn.execute(sqlalchemy.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"),
                         {"d": database})  # fmt: skip
        cut_at = time.monotonic()
        _, stderr = start.communicate(timeout=90)
        log = tmp_path / ".search" / "logs" / "worker-0.log"
        worker_error = _wait_for(lambda: [x for x in log.read_text().splitlines() if x.startswith("error: ")], 60,
                                 "the worker to give up")  # fmt: skip
    finally:
        _stop(start)
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))
        admin.dispose()
    assert start.returncode == 75  # EX_TEMPFAIL: retry later
    assert time.monotonic() - cut_at < 60
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: database unreachable for ") and "--db-outage-limit 4" in last, stderr
    assert "127.0.0.1" in last and "5432" in last
    assert worker_error[0].startswith("error: database unreachable for "), worker_error
    assert "Traceback" not in stderr + log.read_text()


# -- trials that go wrong ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def faulty_study(tmp_path_factory: pytest.TempPathFactory, cli) -> tuple[Path, list[Any], str]:
    """Four trials by one worker: one trains, one diverges, one hits a bug in the study, one runs out of memory."""
    import optuna

    work = tmp_path_factory.mktemp("faulty")
    proc = cli("start", "--study", str(FAULTY_STUDY), "--trials", "4", "--workers", "1", "--pruner", "none",
               "--no-retrain", cwd=work, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    study = optuna.load_study(study_name="faulty", storage=f"sqlite:///{work}/.search/optuna.db")
    return work / ".search", sorted(study.get_trials(), key=lambda t: t.number), proc.stdout


@pytest.mark.slow
def test_each_failing_trial_ends_fail_with_its_reason_and_the_worker_goes_on(faulty_study):
    _, trials, stdout = faulty_study
    assert [(t.user_attrs["mode"], t.state.name) for t in trials] == [
        ("ok", "COMPLETE"), ("diverge", "FAIL"), ("bug", "FAIL"), ("oom", "FAIL"),
    ]  # fmt: skip
    reasons = [t.user_attrs.get("fail_reason") for t in trials]
    assert reasons[1] == "diverged at epoch 2"
    assert reasons[2] == "KeyError: 'n_features'"
    assert reasons[3].startswith("CUDA out of memory. Tried to allocate 20.00 GiB")
    assert len({t.user_attrs["worker"] for t in trials}) == 1
    assert "4/4 trials finished (1 complete, 0 pruned, 3 failed)" in stdout


@pytest.mark.slow
def test_failed_trials_carry_their_reason_to_mlflow_and_a_bug_its_traceback(faulty_study):
    from mlflow import MlflowClient

    project, trials, _ = faulty_study
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    for trial in trials[1:]:
        run = client.get_run(trial.user_attrs["mlflow_run_id"])
        assert run.info.status == "FAILED"
        assert run.data.tags["hpsearch.fail_reason"] == trial.user_attrs["fail_reason"]
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert ("traceback.txt" in artifacts) == (trial.user_attrs["mode"] == "bug")
    bug_run = trials[2].user_attrs["mlflow_run_id"]
    text = Path(client.download_artifacts(bug_run, "traceback.txt")).read_text()
    assert "faulty_study.py" in text and 'data.info["n_features"]' in text and text.strip().endswith("'n_features'")


# -- outages, as the retry helper sees them ------------------------------------------------------


def _lost_connection() -> Exception:
    import psycopg2
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import OperationalError

    try:
        try:
            raise OperationalError(
                "SELECT 1", {}, psycopg2.OperationalError("server closed the connection unexpectedly")
            )
        except OperationalError as exc:
            raise StorageInternalError("An exception is raised during the commit.") from exc
    except StorageInternalError as wrapped:
        return wrapped


def test_lost_connections_are_told_from_other_errors():
    import psycopg2
    from sqlalchemy.exc import OperationalError

    from search.coordination import is_connection_error

    assert is_connection_error(_lost_connection())
    refused = psycopg2.OperationalError('connection to server at "127.0.0.1", port 5432 failed: Connection refused')
    assert is_connection_error(OperationalError("connect", {}, refused))
    wrong_password = psycopg2.OperationalError('FATAL:  password authentication failed for user "x"')
    assert not is_connection_error(OperationalError("connect", {}, wrong_password))
    assert not is_connection_error(ValueError("a bug"))


@pytest.fixture
def fresh_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's outage record, fresh for one test (other tests never see what it leaves)."""
    from search.coordination import _resilience

    monkeypatch.setattr(_resilience, "OUTAGE", _resilience._Outage())


def test_an_outage_is_ridden_out_with_one_line_when_it_starts_and_one_when_it_ends(monkeypatch, caplog, fresh_outage):
    from search.coordination import _resilience

    monkeypatch.setattr(_resilience.time, "sleep", lambda s: None)
    failures = [_lost_connection() for _ in range(4)]

    def flaky() -> str:
        if failures:
            raise failures.pop()
        return "done"

    with caplog.at_level(logging.INFO, logger="search.coordination._resilience"):
        assert _resilience.retrying(flaky, "testing") == "done"
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "database connection lost while testing", "database connection back after 0.0 s",
    ]  # fmt: skip


def test_an_outage_past_the_limit_is_one_clear_error(monkeypatch, fresh_outage):
    from search.coordination import _resilience
    from search.exceptions import DatabaseUnavailableError

    monkeypatch.setenv(_resilience.ENV_OUTAGE_LIMIT, "0.3")

    def down() -> None:
        raise _lost_connection()

    with pytest.raises(DatabaseUnavailableError) as err:
        _resilience.retrying(down, "claiming a trial")
    assert str(err.value).startswith(
        "database unreachable for 0 s while claiming a trial (limit --db-outage-limit 0.3)"
    )
    assert str(err.value).endswith("server closed the connection unexpectedly")


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
            _wait_for(lambda: not _accepts(url("wrong-pw")), 10, "pg_hba.conf to take effect")
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


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_tell_that_lands_between_the_reapers_read_and_write_costs_nothing(tmp_path, backend, request):
    """The worker was only slow: its trial finishes while a reaper is failing it. The reaper must
    neither crash nor leave a retry that would train the same logical trial again."""
    from optuna.trial import TrialState

    from search.api import StartOptions, prepare
    from search.coordination import Coordinator
    from search.settings import SearchSettings

    url = request.getfixturevalue("pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/optuna.db"
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=2,
                                  settings=SearchSettings(heartbeat_interval=1, grace_period=2))).record  # fmt: skip
    coordinator = Coordinator(url, "race")
    study, _ = coordinator.create_or_resume(record, 2)
    slow, _ = coordinator.claim(study)
    slow.suggest_float("x", -2.0, 2.0)
    slow.report(0.5, 1)
    time.sleep(3.0)  # looks dead to the reaper

    storage = coordinator.storage
    original = storage.set_trial_user_attr

    def tell_lands_first(trial_id: int, key: str, value: Any) -> None:
        if trial_id == slow._trial_id and key == "fail_reason":
            study.tell(slow, 0.25)  # the worker's tell, between the reaper's read and its first write
        original(trial_id, key, value)

    storage.set_trial_user_attr = tell_lands_first  # type: ignore[method-assign]
    try:
        reaped = coordinator.reap(study)  # must not raise
    finally:
        storage.set_trial_user_attr = original  # type: ignore[method-assign]
    assert reaped == []
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    assert trials[slow.number].state == TrialState.COMPLETE and trials[slow.number].value == 0.25
    others = [t for t in trials.values() if t.number != slow.number]
    assert all(t.state == TrialState.FAIL for t in others)  # the retry queued for it is cancelled, not WAITING
    assert coordinator.counts().finished_logical == 1


def test_a_first_trial_started_before_mlflow_is_imported_gets_its_run_all_the_same(tmp_path):
    """A worker's first trial starts while MLflow is still being imported: it records its worker at
    once, its run is created on the writer thread meanwhile, and it ends linked to a complete run;
    the next trial creates its run before training, as every later one does."""
    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.execution import connect
    from search.execution._trial import run_trial
    from search.settings import SearchSettings
    from search.tracking import Tracker

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path)
    opts = StartOptions(study=str(SLEEP_STUDY), trials=2, settings=SearchSettings(pruner="none"),
                        study_options={"epoch_seconds": 0.0})  # fmt: skip
    create_or_resume(loc, prepare(opts), 2)
    ctx = connect(loc, "sleep", "test-worker")
    ctx.tracker = Tracker(loc.tracking())  # as if the warm-up had not made MLflow's client yet
    assert not ctx.tracker.ready
    outcomes = []
    for _ in range(2):
        trial, _ = ctx.coordinator.claim(ctx.optuna_study)
        outcomes.append(run_trial(ctx, trial))
        assert ctx.tracker.ready  # the first trial's run made it
    for outcome in outcomes:
        stored = next(t for t in ctx.optuna_study.get_trials() if t.number == outcome.number)
        assert outcome.state == "COMPLETE" and stored.user_attrs["worker"] == "test-worker"
        run = ctx.tracker.client.get_run(stored.user_attrs["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.data.tags["hpsearch.state"] == "COMPLETE"
        assert set(run.data.params) >= {"x", "lr", "trial_number"} and "val_loss" in run.data.metrics


def test_an_mlflow_error_at_run_start_fails_that_trial_and_the_worker_goes_on(tmp_path):
    """A tracking server answering HTTP 500 when a trial's run is created ends that trial, not the worker."""
    from mlflow.exceptions import MlflowException

    from search.api import StartOptions, create_or_resume, prepare, resolve_locations
    from search.execution import connect
    from search.execution._trial import run_trial
    from search.settings import SearchSettings

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path)
    opts = StartOptions(study=str(SLEEP_STUDY), trials=2, settings=SearchSettings(pruner="none"),
                        study_options={"epoch_seconds": 0.0})  # fmt: skip
    create_or_resume(loc, prepare(opts), 2)
    ctx = connect(loc, "sleep", "test-worker")
    create_run = ctx.tracker.client.create_run
    calls = []

    def server_error_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise MlflowException("API request to endpoint /api/2.0/mlflow/runs/create failed with error code 500")
        return create_run(*args, **kwargs)

    ctx.tracker.client.create_run = server_error_once  # type: ignore[method-assign]
    first, _ = ctx.coordinator.claim(ctx.optuna_study)
    failed = run_trial(ctx, first)
    second, _ = ctx.coordinator.claim(ctx.optuna_study)
    done = run_trial(ctx, second)
    assert failed.state == "FAIL" and failed.reason.startswith("MLflow run could not start: MlflowException: API")
    stored = ctx.coordinator.storage.get_trial(first._trial_id)
    assert stored.state.name == "FAIL" and stored.user_attrs["fail_reason"] == failed.reason
    assert done.state == "COMPLETE"  # the same worker trained the next trial
