"""`search slurm submit` against a real one-node Slurm (munged, slurmctld and slurmd from Debian's
packages, all state in a temp dir): an array of workers spends the exact budget, and a cancelled
task's trial resumes from its checkpoint in another task and is counted once."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = str(ROOT / "benchmarks" / "studies" / "sleep_study.py")
STALLING_STUDY = str(ROOT / "tests" / "search" / "data" / "stalling_study.py")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")

# Alone when the suite runs on two processes: a loaded machine delays the daemons and the cancel.
pytestmark = [pytest.mark.slurm, pytest.mark.postgres, pytest.mark.slow, pytest.mark.exclusive]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory) -> Iterator[dict[str, str]]:
    """A running one-node cluster; the environment that points Slurm's commands at it."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    if missing or os.geteuid() != 0 or not Path("/etc/munge/munge.key").exists():
        reason = f"a one-node Slurm needs root, slurm-wlm and munge (missing: {', '.join(missing) or 'root/key'})"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "log"):
        (d / sub).mkdir()
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=hpsearchtest
SlurmctldHost={host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={d}/munge.socket
CryptoType=crypto/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=30
MinJobAge=600
NodeName={host} CPUs={os.cpu_count()} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    munged = ["munged", "--force", f"--socket={d}/munge.socket", "--key-file=/etc/munge/munge.key",
              f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed"]  # fmt: skip
    subprocess.run(munged, check=True, env=env)
    subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env)
    subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout:
            assert time.monotonic() < deadline, (d / "log" / "slurmctld.log").read_text()[-2000:]
            time.sleep(1)
        yield env
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, capture_output=True)
        for pid_file in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
            path = d / pid_file
            if path.exists():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(path.read_text().split()[0]), signal.SIGTERM)


def _trials(url: str) -> list:
    import optuna

    try:
        return optuna.load_study(study_name="sleep", storage=url).trials
    except KeyError:  # `search start` has not created it yet
        return []


def test_an_array_of_workers_spends_the_budget_and_a_cancelled_task_resumes_elsewhere(slurm_env, pg_url, tmp_path):
    env = {**{k: v for k, v in slurm_env.items() if not k.startswith("SEARCH_")}, "OMP_NUM_THREADS": "1"}
    where = ["--storage", pg_url, "--project-dir", str(tmp_path / "project")]
    options = ["--study-option", "epochs=6", "--study-option", "epoch_seconds=1.0", "--checkpoint-every", "0"]
    search = [sys.executable, "-m", "search"]
    # --patience off: the victim trains to its sixth epoch (patience may end a flat one at its third).
    start = subprocess.Popen([*search, "start", "--study", SLEEP_STUDY, "--trials", "4", "--workers", "0", "--pruner",
                              "none", "--patience", "off", *options, *where], cwd=tmp_path, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    submitted = subprocess.run([*search, "slurm", "submit", "--name", "sleep", "--workers", "3",
                                "--gpus-per-worker", "0", "--cpus-per-worker", "1", "--time", "10:00", *where],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = submitted.stdout.split("submitted job ")[1].split(":")[0]

    # Cancel the task whose trial has reported its second epoch (two checkpoints behind it, four epochs
    # ahead: time to cancel it while it trains on a loaded machine).
    deadline, victim = time.monotonic() + 180, None
    while victim is None:
        assert time.monotonic() < deadline and start.poll() is None
        for trial in _trials(pg_url):
            if trial.state.name == "RUNNING" and len(trial.intermediate_values) >= 2:
                victim = trial
                break
        time.sleep(0.5)
    task = victim.user_attrs["worker"].rsplit(":", 1)[1]
    subprocess.run(["scancel", f"{job}_{task}"], env=env, check=True)

    out, _ = start.communicate(timeout=600)
    assert start.returncode == 0, out
    trials = _trials(pg_url)
    cancelled = next(t for t in trials if t.number == victim.number)
    assert cancelled.state.name == "FAIL" and cancelled.user_attrs["fail_reason"] == "interrupted"
    [retry] = [t for t in trials if t.system_attrs.get("failed_trial") == victim.number]
    assert retry.state.name == "COMPLETE" and retry.user_attrs["resumed_from_epoch"] >= 2
    assert retry.user_attrs["worker"].rsplit(":", 1)[1] != task  # another array task resumed it
    logical = {t.system_attrs.get("failed_trial", t.number) for t in trials if t.state.name == "COMPLETE"}
    assert len(logical) == 4  # the exact budget: the cancelled trial counted once
    assert "4/4 trials finished (4 complete" in out
    assert "is the new champion" in out  # the best trial retrained and registered
    logs = list((tmp_path / "project" / "logs" / "slurm").glob(f"sleep-{job}_*.log"))
    assert len(logs) == 3 and any("(cancelled)" in p.read_text() for p in logs)


def test_a_task_whose_trial_stalls_starts_a_fresh_worker_in_its_allocation(slurm_env, pg_url, tmp_path):
    """Exit code 70 (the watchdog failed a hung trial and ended its worker): the batch script starts
    the worker again, which trains the retry, and the search ends."""
    env = {**{k: v for k, v in slurm_env.items() if not k.startswith("SEARCH_")}, "OMP_NUM_THREADS": "1"}
    where = ["--storage", pg_url, "--project-dir", str(tmp_path / "project")]
    search = [sys.executable, "-m", "search"]
    start = subprocess.Popen([*search, "start", "--study", STALLING_STUDY, "--name", "sleep", "--trials", "2",
                              "--workers", "0", "--pruner", "none", "--no-retrain", "--stall-timeout", "5",
                              "--heartbeat-interval", "1", "--grace-period", "600",
                              "--study-option", f"marker={tmp_path / 'hung-once'}", *where],
                             cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)  # fmt: skip
    submitted = subprocess.run([*search, "slurm", "submit", "--name", "sleep", "--workers", "1",
                                "--gpus-per-worker", "0", "--cpus-per-worker", "1", "--time", "10:00", *where],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = submitted.stdout.split("submitted job ")[1].split(":")[0]
    out, _ = start.communicate(timeout=400)
    assert start.returncode == 0, out
    trials = _trials(pg_url)
    assert sorted(t.state.name for t in trials) == ["COMPLETE", "COMPLETE", "FAIL"]
    [stalled] = [t for t in trials if t.state.name == "FAIL"]
    assert stalled.user_attrs["fail_reason"].startswith("stalled: ")
    [log] = (tmp_path / "project" / "logs" / "slurm").glob(f"sleep-{job}_*.log")
    text = log.read_text()
    assert "exited with 70 (a stalled trial): starting a fresh one" in text
    assert "hpsearch worker exited with 0 (finished)" in text
