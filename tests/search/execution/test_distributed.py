"""Distributed search on the real PostgreSQL: workers started as separate OS processes, as nodes would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
SLEEP_STUDY = str(ROOT / "benchmarks" / "studies" / "sleep_study.py")
# resmlp samples effective batches up to 256 x 4 per process: two processes need 2,048 training rows
# (digits has 1,257; a larger effective batch fails the trial with the trainer's one-line refusal).
TWO_RANK_DATA = ("--study-option", "data=synthetic", "--study-option", "rows=3000", "--study-option", "features=16")


def _env(storage: str, tracking: str | None = None, project: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    env.update(SEARCH_STORAGE=storage, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    if tracking:
        env["SEARCH_TRACKING_URI"] = tracking
    if project:
        env["SEARCH_PROJECT_DIR"] = str(project)
    return env


def _search(*args: str, env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "search", *args], env=env, cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip


def _wait_created(log: Path, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "' created; budget" in log.read_text(errors="replace"):
            return
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    raise AssertionError(f"study not created in time:\n{log.read_text()}")


def _trials(storage: str, name: str):
    import optuna

    return optuna.load_study(study_name=name, storage=storage.replace("postgresql://", "postgresql+psycopg2://")
                             ).get_trials(deepcopy=False)  # fmt: skip


def _finish(procs: list[subprocess.Popen[bytes]], timeout: float = 300) -> list[int]:
    deadline = time.monotonic() + timeout
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(-9)
    return codes


def test_exact_budget_with_eight_racing_workers(pg_databases, tmp_path):
    from optuna.trial import TrialState

    storage, tracking = pg_databases(), pg_databases()
    env = _env(storage, tracking, tmp_path / "project")
    start_log = tmp_path / "start.log"
    follower = _search("start", "--study", SLEEP_STUDY, "--trials", "40", "--workers", "0", "--no-retrain",
                       "--pruner", "none", "--study-option", "epoch_seconds=0.05", "--study-option", "epochs=2",
                       env=env, cwd=tmp_path, log=start_log)  # fmt: skip
    _wait_created(start_log, follower)
    workers = [
        _search("worker", "--name", "sleep", env=env, cwd=tmp_path, log=tmp_path / f"w{i}.log") for i in range(8)
    ]
    codes = _finish(workers + [follower])
    logs = "\n".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert codes == [0] * 9, logs
    trials = _trials(storage, "sleep")
    assert len(trials) == 40, logs
    assert sorted(t.number for t in trials) == list(range(40))
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs["worker"] for t in trials}) >= 2  # the workers really raced
    # Every worker numbers itself 0, as on separate nodes: one shared seed would repeat params.
    assert len({(t.params["x"], t.params["lr"]) for t in trials}) == 40, "workers proposed the same params"

    from mlflow import MlflowClient

    client = MlflowClient(tracking.replace("postgresql://", "postgresql+psycopg2://"))
    experiment = client.get_experiment_by_name("sleep")
    runs = client.search_runs([experiment.experiment_id], "tags.`hpsearch.role` = 'trial'", max_results=100)
    assert len(runs) == 40


def test_late_joining_worker_shares_the_budget(pg_url, tmp_path):
    from optuna.trial import TrialState

    env = _env(pg_url, project=tmp_path / "project")
    start_log = tmp_path / "start.log"
    # About 16 s of trials in all: time for a second worker to start (imports take seconds on a loaded machine).
    start = _search("start", "--study", SLEEP_STUDY, "--trials", "16", "--workers", "1", "--no-retrain",
                    "--pruner", "none", "--study-option", "epoch_seconds=0.5", "--study-option", "epochs=2",
                    env=env, cwd=tmp_path, log=start_log)  # fmt: skip
    _wait_created(start_log, start)
    deadline = time.monotonic() + 180
    while not any(t.state == TrialState.COMPLETE for t in _trials(pg_url, "sleep")):
        assert time.monotonic() < deadline and start.poll() is None, start_log.read_text()
        time.sleep(0.5)
    late = _search("worker", "--name", "sleep", env=env, cwd=tmp_path, log=tmp_path / "late.log")
    codes = _finish([late, start])
    assert codes == [0, 0], start_log.read_text() + (tmp_path / "late.log").read_text()
    trials = _trials(pg_url, "sleep")
    assert len(trials) == 16 and all(t.state == TrialState.COMPLETE for t in trials)
    hosts_pids = {t.user_attrs["worker"].split(":")[1] for t in trials}
    assert len(hosts_pids) == 2, "the late worker ran no trial"


def test_two_process_sharded_trial_prunes_every_rank_at_the_same_epoch(pg_url, tmp_path):
    # FSDP2 over gloo (--sharding fsdp); the plain DDP groups run in the tests below.
    from optuna.trial import TrialState

    env = _env(pg_url, project=tmp_path / "project")
    start_log = tmp_path / "start.log"
    start = _search("start", "--study", "resmlp", "--trials", "5", "--workers", "0", "--no-retrain",
                    "--pruner", "median:startup=1,warmup=0", "--study-option", "search_epochs=4", *TWO_RANK_DATA,
                    env=env, cwd=tmp_path, log=start_log)  # fmt: skip
    _wait_created(start_log, start)
    group = _search("worker", "--name", "resmlp", "--procs-per-trial", "2", "--sharding", "fsdp", env=env,
                    cwd=tmp_path, log=tmp_path / "group.log")  # fmt: skip
    codes = _finish([group, start])
    assert codes == [0, 0], (tmp_path / "group.log").read_text()
    trials = _trials(pg_url, "resmlp")
    assert len(trials) == 5
    assert all(t.user_attrs["sharding"] == "fsdp" and t.state != TrialState.FAIL for t in trials), [
        (t.state, t.user_attrs.get("sharding"), t.user_attrs.get("fail_reason")) for t in trials
    ]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned, "the median pruner pruned nothing"
    for trial in trials:
        ranks = trial.user_attrs["epochs_run_per_rank"]
        assert ranks == [trial.user_attrs["epochs_run"]] * 2, (trial.number, ranks)
    assert all(t.user_attrs["epochs_run"] == max(t.intermediate_values) <= 4 for t in pruned)
    assert min(t.user_attrs["epochs_run"] for t in pruned) < 4  # pruning stopped a group early
    # A sharded model's forward is a collective: rank 0 counts its parameters but does not time it.
    finals = [t.user_attrs["final_metrics"] for t in trials]
    assert all(f["params"] > 1000 and "latency_ms" not in f for f in finals), finals


def test_trials_that_break_a_process_group_cost_only_themselves(pg_url, tmp_path):
    """The faulty study's `bug` and `oom` trials kill their group: four broken groups in eight trials,
    more than the relaunch limit, yet the worker goes on to the end of the budget."""
    from optuna.trial import TrialState

    faulty = str(ROOT / "tests" / "search" / "data" / "faulty_study.py")
    env = _env(pg_url, project=tmp_path / "project")
    start_log = tmp_path / "start.log"
    start = _search("start", "--study", faulty, "--trials", "8", "--workers", "0", "--no-retrain", "--pruner", "none",
                    env=env, cwd=tmp_path, log=start_log)  # fmt: skip
    _wait_created(start_log, start)
    group = _search("worker", "--name", "faulty", "--procs-per-trial", "2", env=env, cwd=tmp_path,
                    log=tmp_path / "group.log")  # fmt: skip
    codes = _finish([group, start], timeout=500)
    assert codes == [0, 0], (tmp_path / "group.log").read_text()
    trials = _trials(pg_url, "faulty")
    states = {t.user_attrs["mode"]: set() for t in trials}
    for trial in trials:
        states[trial.user_attrs["mode"]].add(trial.state)
    assert len(trials) == 8
    assert states == {"ok": {TrialState.COMPLETE}, "diverge": {TrialState.FAIL}, "bug": {TrialState.FAIL},
                      "oom": {TrialState.FAIL}}  # fmt: skip


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _node(env: dict[str, str], cwd: Path, log: Path, endpoint: str, study: str = "resmlp") -> subprocess.Popen[bytes]:
    """One "node" of a two-node trial group: its own launcher, torchrun agent and rank."""
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "search", "worker", "--name", study, "--nnodes", "2",
                                 "--rdzv-endpoint", endpoint], env=env, cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip


def test_a_trial_over_two_nodes_prunes_both_at_the_same_epoch(pg_url, tmp_path):
    """Two launchers meet through torchrun's c10d rendezvous (gloo), as two nodes would: every trial
    runs one rank on each, and a pruned trial stops on both at the same epoch."""
    from optuna.trial import TrialState

    env = _env(pg_url, project=tmp_path / "project")
    start_log = tmp_path / "start.log"
    start = _search("start", "--study", "resmlp", "--trials", "4", "--workers", "0", "--no-retrain",
                    "--pruner", "median:startup=1,warmup=0", "--study-option", "search_epochs=4", *TWO_RANK_DATA,
                    env=env, cwd=tmp_path, log=start_log)  # fmt: skip
    _wait_created(start_log, start)
    endpoint = f"127.0.0.1:{_free_port()}"
    nodes = [_node(env, tmp_path, tmp_path / f"node{i}.log", endpoint) for i in range(2)]
    codes = _finish([*nodes, start], timeout=400)
    logs = "\n".join((tmp_path / f"node{i}.log").read_text() for i in range(2))
    assert codes == [0, 0, 0], logs
    trials = _trials(pg_url, "resmlp")
    assert len(trials) == 4 and all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    for trial in trials:
        assert trial.user_attrs["epochs_run_per_rank"] == [trial.user_attrs["epochs_run"]] * 2, trial.number
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned, "the median pruner pruned nothing"
    assert all(t.user_attrs["epochs_run"] == max(t.intermediate_values) <= 4 for t in pruned)
    assert min(t.user_attrs["epochs_run"] for t in pruned) < 4  # pruning stopped both nodes early
    complete = [t.user_attrs["final_metrics"] for t in trials if t.state == TrialState.COMPLETE]
    assert complete and all(f["latency_ms"] > 0 for f in complete), complete  # rank 0 times its DDP model alone


@pytest.mark.parametrize("lost", ["the other node", "rank 0's node"])
def test_losing_a_node_mid_trial_retries_the_trial_and_frees_the_other(pg_url, tmp_path, lost):
    """A node of a two-node trial dies (every process of it killed). The trial ends FAIL at once (the
    survivor's collective fails: "lost a node") or after the grace period (rank 0's node: no
    heartbeat), its retry is queued either way; the survivor does not hang in a collective but waits
    at the rendezvous, and a replacement node resumes the trial from its checkpoint."""
    import psutil
    from optuna.trial import TrialState

    env = _env(pg_url, project=tmp_path / "project")
    start_log = tmp_path / "start.log"
    start = _search("start", "--study", SLEEP_STUDY, "--trials", "2", "--workers", "0", "--no-retrain",
                    "--pruner", "none", "--heartbeat-interval", "1", "--grace-period", "5", "--checkpoint-every", "0",
                    "--study-option",
                    "epochs=6", "--study-option", "epoch_seconds=1", env=env, cwd=tmp_path, log=start_log)  # fmt: skip
    _wait_created(start_log, start)
    endpoint = f"127.0.0.1:{_free_port()}"
    nodes = [_node(env, tmp_path, tmp_path / f"node{i}.log", endpoint, study="sleep") for i in range(2)]
    deadline = time.monotonic() + 180
    while not (running := [t for t in _trials(pg_url, "sleep") if len(t.intermediate_values) >= 2]):
        assert time.monotonic() < deadline and start.poll() is None, start_log.read_text()
        time.sleep(0.3)
    victim_trial = running[0]
    leader_pid = int(victim_trial.user_attrs["worker"].split(":")[1])  # host:launcher pid:index:gangN
    leader = next(n for n in nodes if n.pid == leader_pid)
    victim = leader if lost == "rank 0's node" else next(n for n in nodes if n is not leader)
    for proc in [psutil.Process(victim.pid), *psutil.Process(victim.pid).children(recursive=True)]:
        proc.kill()
    survivor = next(n for n in nodes if n is not victim)
    deadline = time.monotonic() + 60  # failed at once, or once the 5 s grace period has passed
    while next(t for t in _trials(pg_url, "sleep") if t.number == victim_trial.number).state != TrialState.FAIL:
        assert time.monotonic() < deadline and start.poll() is None, start_log.read_text()
        time.sleep(0.3)
    time.sleep(2)  # two heartbeats past the failure
    assert survivor.poll() is None  # not crashed, not given up: waiting for a node to join again
    replacement = _node(env, tmp_path, tmp_path / "replacement.log", endpoint, study="sleep")
    codes = _finish([survivor, replacement, start], timeout=300)
    logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("*.log")))
    assert codes == [0, 0, 0], logs
    trials = _trials(pg_url, "sleep")
    first = next(t for t in trials if t.number == victim_trial.number)
    expected = "lost a node of its process group: " if lost == "the other node" else "worker lost: no heartbeat"
    assert first.state == TrialState.FAIL and first.user_attrs["fail_reason"].startswith(expected), first.user_attrs
    [retry] = [t for t in trials if t.system_attrs.get("failed_trial") == first.number]
    assert retry.state == TrialState.COMPLETE and retry.user_attrs["resumed_from_epoch"] >= 1
    logical = {t.system_attrs.get("failed_trial", t.number) for t in trials if t.state == TrialState.COMPLETE}
    assert len(logical) == 2 and not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
