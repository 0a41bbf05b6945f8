"""Failures of the worker's machine, not of its trial: the trial is requeued, its retries and the
study's budget untouched, and the worker stops with exit code 75 and one line naming the cause."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = ROOT / "benchmarks" / "studies" / "sleep_study.py"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
FAST = ["--heartbeat-interval", "1", "--grace-period", "3", "--pruner", "none", "--no-retrain",
        "--checkpoint-every", "0", "--patience", "off"]  # fmt: skip


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs with all but a few KiB taken: the first checkpoint does not fit."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        reason = f"needs to mount a tmpfs (root): {done.stderr.strip()}"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        stat = os.statvfs(mount)
        (mount / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 8192))
        yield mount
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=60)


@pytest.mark.slow
def test_a_full_checkpoint_disk_requeues_the_trial_and_stops_the_worker_with_75(cli, tmp_path, full_disk):
    """Issue 46 item 6: every trial failed with torch's "unexpected pos" and the budget burned."""
    from optuna.trial import TrialState

    import storage

    args = ["start", "--study", str(SLEEP_STUDY), "--name", "full", "--trials", "3", "--workers", "1", *FAST,
            "--max-retries", "0", "--checkpoint-dir", str(full_disk / "checkpoints")]  # fmt: skip
    proc = cli(*args, cwd=tmp_path, timeout=300)
    assert proc.returncode == 75, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "no space left on device" in lines[0] and "requeued" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and "unexpected pos" not in proc.stderr

    url = storage.sqlite_url(tmp_path / ".search" / "optuna.db")
    optuna_storage = storage.open_optuna_storage(url)
    study_id = optuna_storage.get_study_id_from_name("full")
    trials = optuna_storage.get_all_trials(study_id)
    # One attempt failed of the machine, its retry waiting (with --max-retries 0): nothing finished.
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING], trials
    assert trials[0].user_attrs["fail_reason"].startswith("worker's machine: no space left on device")
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].system_attrs["free_retries"] == [0]
    assert "fail_reason" not in trials[1].user_attrs
    assert storage.count_trials(optuna_storage.engine, study_id).finished_logical == 0


def test_machine_failures_are_told_from_the_trials_own(full_disk, tmp_path):
    import errno

    from search.execution._environment import environment_failure

    torch_says = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    torch_says.__context__ = OSError(errno.ENOSPC, "No space left on device")  # as torch.save to a full disk
    assert environment_failure(torch_says, tmp_path) == f"no space left on device ({tmp_path})"
    assert environment_failure(OSError(errno.EROFS, "Read-only file system", "/ro/x"), tmp_path).startswith(
        "read-only file system (/ro/x)"
    )
    assert environment_failure(OSError(errno.ENAMETOOLONG, "File name too long"), tmp_path).startswith("file name")
    # torch's words without the OSError: the free space of the checkpoint directory decides.
    bare = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert environment_failure(bare, full_disk / "ck" / "trial-0").startswith("no space left on device")
    assert environment_failure(ValueError("a bug in the study"), tmp_path) is None
    assert environment_failure(OSError(errno.ENOENT, "No such file"), tmp_path) is None


@pytest.mark.slow
def test_a_sqlite_study_lock_held_too_long_is_a_temporary_failure_naming_the_lock(cli, tmp_path):
    """Issue 46 item 7: a study lock held past the wait (here by a process that holds it and does
    nothing, as a stopped one would) ended every worker with exit code 2, as if the input were bad.
    It is waited out up to --db-outage-limit, then exit 75 with one line naming the lock file."""
    import sys

    import storage
    from search.api import StartOptions, prepare
    from search.coordination import PARENT_RUN_ATTR, Coordinator

    (tmp_path / ".search").mkdir()
    url = storage.sqlite_url(tmp_path / ".search" / "optuna.db")
    record = prepare(StartOptions(study=str(SLEEP_STUDY), trials=2)).record
    coordinator = Coordinator(url, "held")
    study, _ = coordinator.create_or_resume(record, 2)
    study.set_user_attr(PARENT_RUN_ATTR, "none")  # as `search start` leaves it, for the worker to join
    lock_file = f"{storage.sqlite_path(url)}.{storage._lock._lock_key('held')}.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from filelock import FileLock; import time; lock = FileLock({lock_file!r}); "
         "lock.acquire(); print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = cli("worker", "--name", "held", "--db-outage-limit", "2", cwd=tmp_path, timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 75, proc.stdout + proc.stderr
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("error: another process has held the lock of study 'held'") and lock_file in last, last
    assert "Traceback" not in proc.stderr
