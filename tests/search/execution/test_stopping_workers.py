"""Stopping a search: Ctrl-C, SIGTERM and SIGHUP leave nothing running and the same command resumes;
a local worker that is killed is replaced, one that keeps dying ends `search start` with a fault.

The scenarios run ``search`` as users do, in subprocesses against the real PostgreSQL server, with
the training-free sleep study (``benchmarks/studies/sleep_study.py``: every epoch sleeps), so a
trial's length is known and a worker can be killed at a chosen epoch. Heartbeats every second and
a grace period of 3 s keep the waits short (``search_helpers.FAST``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from search_helpers import FAST, SLEEP_STUDY, StudyWatch, assert_exact_budget, spawn, stop, wait_for

# -- Ctrl-C ---------------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.slow
def test_ctrl_c_leaves_nothing_running_and_the_same_command_resumes(pg_url, tmp_path, cli):
    args = ["start", "--study", str(SLEEP_STUDY), "--name", "ctrlc", "--trials", "2", "--workers", "2", *FAST,
            "--study-option", "epochs=6", "--study-option", "epoch_seconds=0.6", "--storage", pg_url]  # fmt: skip
    # A terminal's Ctrl-C reaches every process of the foreground group: `search start` and its workers.
    start = spawn(args, tmp_path, tmp_path / "start.log", start_new_session=True)
    try:
        watch = StudyWatch(pg_url, "ctrlc")
        advanced = wait_for(lambda: watch.running_at(2), 120, "a trial to reach epoch 2")
        os.killpg(start.pid, signal.SIGINT)
        assert start.wait(timeout=90) == 130
    finally:
        stop(start)
    interrupted = [t for t in watch.trials() if t.state.name == "FAIL"]
    seen = _seen(watch.trials(), tmp_path / "start.log")
    assert interrupted and all(t.user_attrs.get("fail_reason") == "interrupted" for t in interrupted), seen
    assert [t.number for t in watch.trials() if t.state.name == "RUNNING"] == [], seen
    again = cli(*args, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = watch.trials()
    assert_exact_budget(trials, 2)
    # The trial seen at epoch 2 may finish before the signal lands under load: follow the interrupted
    # trial that trained furthest, which resumes from its checkpoint rather than from epoch 0. Its
    # checkpoint may hold one epoch more than it reported: one is written before its epoch's report.
    furthest = max(interrupted, key=lambda t: max(t.intermediate_values, default=0))
    reached = max(furthest.intermediate_values, default=0)
    assert reached >= 1, f"no interrupted trial had trained an epoch (trial {advanced.number} was at 2)"
    [resumed] = [t for t in trials if t.system_attrs.get("failed_trial") == furthest.number]
    assert resumed.state.name == "COMPLETE" and 1 <= resumed.user_attrs["resumed_from_epoch"] <= reached + 1


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_stops_search_start_and_every_process_it_started(pg_url, tmp_path, cli, signum, code):
    """What a scheduler, systemd or `docker stop` sends, to `search start` alone: its workers stop as
    for Ctrl-C (their trials queued again), none of its processes outlives it, and it exits 128+N."""
    import psutil

    name = f"stopped-{signum.name.lower()}"
    args = ["start", "--study", str(SLEEP_STUDY), "--name", name, "--trials", "2", "--workers", "2", *FAST,
            "--study-option", "epochs=6", "--study-option", "epoch_seconds=0.6", "--storage", pg_url]  # fmt: skip
    start = spawn(args, tmp_path, tmp_path / "start.log")
    tree: list[Any] = []
    try:
        watch = StudyWatch(pg_url, name)
        wait_for(lambda: watch.running_at(1), 120, "a trial to reach epoch 1")
        tree = psutil.Process(start.pid).children(recursive=True)
        assert len(tree) >= 2, tree
        start.send_signal(signum)
        assert start.wait(timeout=90) == code, (tmp_path / "start.log").read_text()
        time.sleep(0.5)
        left = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], f"processes of `search start` still running after it exited: {left}"
    finally:
        stop(start)
        for proc in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
    assert "interrupted: running trials were stopped" in (tmp_path / "start.log").read_text()
    trials = watch.trials()
    seen = _seen(trials, tmp_path / "start.log")
    assert [t.number for t in trials if t.state.name == "RUNNING"] == [], seen
    interrupted = [t for t in trials if t.state.name == "FAIL"]
    assert interrupted and all(t.user_attrs.get("fail_reason") == "interrupted" for t in interrupted), seen
    assert [t for t in trials if t.state.name == "WAITING"], f"the stopped trials' retries were not queued\n{seen}"
    if signum == signal.SIGTERM:  # the same command resumes and spends the budget exactly
        again = cli(*args, cwd=tmp_path, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert_exact_budget(watch.trials(), 2)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_sigkilled_local_worker_is_replaced_while_a_worker_elsewhere_trains_the_study(pg_url, tmp_path):
    """The OOM killer takes `search start`'s only local worker while another node's worker trains:
    a fresh local worker takes its place (not exit 2, "bad input"), and the study ends with its budget."""
    import psutil

    project = tmp_path / "project"
    where = ["--storage", pg_url, "--project-dir", str(project)]
    start = spawn(["start", "--study", str(SLEEP_STUDY), "--name", "oom", "--trials", "4", "--workers", "1", *FAST,
                    "--study-option", "epochs=5", "--study-option", "epoch_seconds=0.5", *where], tmp_path,
                   tmp_path / "start.log")  # fmt: skip
    elsewhere = None
    try:
        watch = StudyWatch(pg_url, "oom")
        elsewhere = spawn(["worker", "--name", "oom", *where], tmp_path, tmp_path / "elsewhere.log")
        [local] = psutil.Process(start.pid).children()

        def local_running() -> Any:
            return next((t for t in watch.trials() if t.state.name == "RUNNING"
                         and f":{local.pid}:" in t.user_attrs.get("worker", "")), None)  # fmt: skip

        wait_for(local_running, 120, "the local worker to run a trial")
        local.kill()
        assert start.wait(timeout=240) == 0, (tmp_path / "start.log").read_text()
        assert elsewhere.wait(timeout=60) == 0
    finally:
        stop(start, *([elsewhere] if elsewhere else []))
    log = (tmp_path / "start.log").read_text()
    assert "worker 0 died (killed by SIGKILL) with the study unfinished; starting a fresh one (1 of 3 in a row)" in log
    assert_exact_budget(watch.trials(), 4)


@pytest.mark.slow
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


def _seen(trials: list[Any], log: Path) -> str:
    """What a failed assertion shows: each trial's state, reason and epochs, then `search start`'s log."""
    rows = [f"trial {t.number} {t.state.name} {t.user_attrs.get('fail_reason')!r} epochs "
            f"{sorted(t.intermediate_values)} worker {t.user_attrs.get('worker')}" for t in trials]  # fmt: skip
    return "\n".join([*rows, log.read_text() if log.exists() else "(no log)"])
