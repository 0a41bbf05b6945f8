"""Freeze-thaw under faults: a worker SIGKILLed or frozen (SIGSTOP) around a pause or a resumption,
and Ctrl-C while trials are paused, keep the budget exact and the paused trials resumable.

The ranked study (``tests/search/data/ranked_study.py``: loss ``x + 1/epoch``, the model's epoch
counter a buffer) runs under ``search start`` with ``--pruner asha:min=1,factor=2`` (rungs at
epochs 1, 2 and 4 of 6), heartbeats every second and a grace period of 3 s, a checkpoint every epoch.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from http_helpers import free_port, serve_mlflow, stop_server
from search_helpers import (
    GRACE_S,
    StudyWatch,
    assert_exact_logical_budget,
    frozen_while_running,
    logical,
    mlflow_runs,
    paused_now,
    spawn,
    stop,
    wait_for,
)

RANKED_STUDY = Path(__file__).resolve().parents[1] / "data" / "ranked_study.py"
EPOCHS, RUNGS = 6, (1, 2, 4)
pytestmark = pytest.mark.slow


def _args(name: str, storage: str, trials: int = 8, sleep: float = 0.6, tracking: str | None = None) -> list[str]:
    return ["start", "--study", str(RANKED_STUDY), "--name", name, "--trials", str(trials), "--workers", "2",
            "--heartbeat-interval", "1", "--grace-period", str(GRACE_S), "--pruner", "asha:min=1,factor=2",
            "--no-retrain", "--checkpoint-every", "0", "--patience", "off", "--storage", storage,
            "--study-option", f"epochs={EPOCHS}", "--study-option", f"sleep={sleep}",
            *(["--tracking-uri", tracking] if tracking else [])]  # fmt: skip


def _pid(trial: Any) -> int:
    return int(trial.user_attrs["worker"].split(":")[-2])


def _frozen(watch: StudyWatch, find: Any) -> Any:
    """The trial ``find`` names, its worker stopped (SIGSTOP) while the trial still runs. A worker
    that finished the trial (paused, pruned or completed it) between the look and the signal is
    woken again and None returned: the next look finds another."""
    target = find(watch)
    return target if target is not None and frozen_while_running(watch, target.number, _pid(target), 0.5) else None


def _resumed_mid_training(watch: StudyWatch) -> Any:
    """A RUNNING continuation of a paused trial (or its retry) that has trained an epoch since it
    resumed, and now trains the epoch after one that is no rung."""
    trials = watch.trials()
    by_number = {t.number: t for t in trials}
    for t in trials:
        reached = max(t.intermediate_values, default=0)
        if t.state.name == "RUNNING" and "resumed_from" in t.user_attrs and "worker" in t.user_attrs \
                and reached > by_number[t.user_attrs["resumed_from"]].user_attrs["paused_at"] \
                and reached < EPOCHS and reached not in RUNGS:  # fmt: skip
            return t
    return None


def _check_paused_checkpoints(watch: StudyWatch, root: Path) -> int:
    """Every paused trial that no attempt continues yet still has its checkpoints; how many. Once the
    study has ended (nothing runs or waits) its paused trials end as they are and their checkpoints go:
    on a slow machine the other worker may finish the study while one is frozen."""
    paused = paused_now(watch.trials())
    missing = [n for n in paused if not (root / f"trial-{n}").is_dir()]
    if missing and not [t for t in watch.trials() if t.state.name in ("RUNNING", "WAITING")]:
        return len(paused)  # the study ended between the two looks
    assert not missing, f"checkpoints of paused trials {missing} were deleted while the study ran"
    return len(paused)


def _check_after(trials: list[Any], budget: int, resumed: bool = True) -> None:
    """The budget is exact, every attempt's curve is the trial's own (``x + 1/e``), and every
    continuation went on from a checkpoint (at or past the pause it continues); with ``resumed``,
    some paused trial was resumed (the case the test is about)."""
    assert_exact_logical_budget(trials, budget)
    by_number = {t.number: t for t in trials}
    for t in trials:
        for epoch, value in t.intermediate_values.items():
            assert value == pytest.approx(t.params["x"] + 1 / epoch, abs=1e-4), (t.number, epoch)
        if "resumed_from" in t.user_attrs and t.state.name in ("COMPLETE", "PRUNED"):
            paused = by_number[t.user_attrs["resumed_from"]]
            assert t.user_attrs["resumed_from_epoch"] >= paused.user_attrs["paused_at"], t.number
    assert not resumed or [t for t in trials if "resumed_from" in t.user_attrs], "no paused trial was resumed"


def _finish(start: Any, log: Path, timeout: float = 240) -> None:
    assert start.wait(timeout=timeout) == 0, log.read_text()[-4000:]


# -- a worker killed while it trains a resumed trial ----------------------------------------------


def test_a_worker_killed_in_a_resumed_trial_is_retried_from_its_newest_checkpoint(tmp_path):
    storage = f"sqlite:///{tmp_path}/.search/optuna.db"
    root = tmp_path / ".search" / "checkpoints" / "ft-kill"
    start = spawn(_args("ft-kill", storage, trials=10), tmp_path, tmp_path / "start.log")
    try:
        watch = StudyWatch(storage, "ft-kill", timeout=120)
        checked = 0

        def victim() -> Any:
            nonlocal checked
            checked += _check_paused_checkpoints(watch, root)  # mid-run, at every look
            return _frozen(watch, _resumed_mid_training)

        target = wait_for(victim, 180, "a resumed trial to train past its pause")
        reached = max(target.intermediate_values)
        os.kill(_pid(target), signal.SIGKILL)  # frozen, its trial still RUNNING
        assert (root / f"trial-{logical(target)}").is_dir()  # the dead attempt's checkpoints stay for its retry
        _finish(start, tmp_path / "start.log")
    finally:
        stop(start)
    assert checked, "no paused trial was seen while the study ran"
    trials = watch.trials()
    _check_after(trials, 10)
    killed = next(t for t in trials if t.number == target.number)
    assert killed.state.name == "FAIL" and "worker lost" in killed.user_attrs["fail_reason"]
    [retry] = [t for t in trials if t.system_attrs.get("retry_history", [None])[-1] == target.number]
    assert retry.state.name in ("COMPLETE", "PRUNED")
    assert retry.user_attrs["resumed_from_epoch"] >= reached  # from its newest checkpoint, not the pause's
    # MLflow: the retry's run is a retry of the killed attempt's (which ends KILLED), not a resumption.
    runs = mlflow_runs(tmp_path / ".search")
    killed_run, retry_run = runs[killed.user_attrs["mlflow_run_id"]], runs[retry.user_attrs["mlflow_run_id"]]
    assert killed_run.info.status == "KILLED"
    assert retry_run.data.tags.get("hpsearch.retry_of") == killed_run.info.run_id, retry_run.data.tags
    assert "hpsearch.resumed_from" not in retry_run.data.tags
    log = (tmp_path / "start.log").read_text()
    assert "died (killed by SIGKILL) with the study unfinished" in log
    # The summary counts the paused trial once resumed, though its resumption's retry names it too.
    [summary] = [line for line in log.splitlines() if line.startswith("study 'ft-kill': ")]
    assert summary.endswith(" 0 failed)"), summary
    assert not list(root.glob("trial-*")), "checkpoints were left behind"


# -- a worker frozen around a pause or a resumption -------------------------------------------------


def _pausing(watch: StudyWatch) -> Any:
    """A RUNNING first attempt that trains the epoch of a rung: it pauses or goes on there."""
    for t in watch.trials():
        reached = max(t.intermediate_values, default=0)
        if t.state.name == "RUNNING" and "failed_trial" not in t.system_attrs and "worker" in t.user_attrs \
                and reached + 1 in RUNGS[1:]:  # fmt: skip
            return t
    return None


@pytest.mark.postgres
@pytest.mark.parametrize("around", ["resume", "pause"])
def test_a_worker_frozen_around_a_pause_or_a_resume_does_no_damage_when_it_wakes(pg_url, tmp_path, around):
    """MLflow behind a tracking server, as with a PostgreSQL study on several nodes: with the embedded
    store (SQLite), a worker stopped in the middle of an MLflow write keeps the file locked, and the
    live worker's tracking waits for it (up to ``--db-outage-limit``) before it can take the retry."""
    root = tmp_path / ".search" / "checkpoints" / "ft-stop"
    (tmp_path / "mlflow").mkdir()
    port = free_port()
    server = serve_mlflow(port, tmp_path / "mlflow" / "mlflow.db", tmp_path / "mlflow.log")
    start = None
    try:
        start = spawn(_args("ft-stop", pg_url, trials=10, tracking=f"http://127.0.0.1:{port}"), tmp_path,
                      tmp_path / "start.log")  # fmt: skip
        watch = StudyWatch(pg_url, "ft-stop")
        find = _resumed_mid_training if around == "resume" else _pausing
        target = wait_for(lambda: _check_paused_checkpoints(watch, root) >= 0 and _frozen(watch, find), 180,
                          f"a worker to {around} a trial")  # fmt: skip
        pid = _pid(target)
        try:
            # Past the grace period its trial is reaped and its retry taken by the other worker, even
            # when the frozen worker stopped in the middle of a write, its trial's row locked: the
            # server ends its transaction after one grace period (storage._engine.end_silent_transactions).
            wait_for(lambda: watch.trial(target.number).state.name == "FAIL", 60, "the frozen trial to be reaped")
            # Its retry may train the one epoch to a rung and pause there between two looks: taken is
            # enough (RUNNING or already finished), only a retry left WAITING is wrong.
            wait_for(lambda: [t for t in watch.trials() if t.state.name != "WAITING"
                              and t.system_attrs.get("retry_history", [None])[-1] == target.number], 60,
                     "its retry to run")  # fmt: skip
            _check_paused_checkpoints(watch, root)
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(2 * 0.6)  # it wakes mid-epoch: it finishes the epoch, reports it, and finds its trial taken
        _check_paused_checkpoints(watch, root)
        _finish(start, tmp_path / "start.log")
    finally:
        if start is not None:
            stop(start)
        stop_server(server)
    trials = watch.trials()
    _check_after(trials, 10)
    assert watch.trial(target.number).state.name == "FAIL"  # the woken worker did not finish it
    assert not list(root.glob("trial-*")), "checkpoints were left behind"


# -- Ctrl-C while trials are paused -----------------------------------------------------------------


def test_ctrl_c_while_trials_are_paused_keeps_them_resumable(cli, tmp_path):
    from search.settings._freeze_thaw import logical_values, top_at

    storage = f"sqlite:///{tmp_path}/.search/optuna.db"
    root = tmp_path / ".search" / "checkpoints" / "ft-ctrlc"
    args = _args("ft-ctrlc", storage, trials=8, sleep=0.4)
    start = spawn(args, tmp_path, tmp_path / "start.log", start_new_session=True)
    try:
        watch = StudyWatch(storage, "ft-ctrlc", timeout=120)

        def paused_while_running() -> dict[int, Any]:
            trials = watch.trials()
            paused = paused_now(trials)
            return paused if paused and any(t.state.name == "RUNNING" for t in trials) else {}

        seen = wait_for(paused_while_running, 180, "a trial to pause while another runs")
        os.killpg(start.pid, signal.SIGINT)
        assert start.wait(timeout=90) == 130, (tmp_path / "start.log").read_text()[-4000:]
    finally:
        stop(start)
    trials = watch.trials()
    assert [t.number for t in trials if t.state.name == "RUNNING"] == []
    paused = paused_now(trials)
    # Under load a worker may resume a trial seen paused before the signal lands: its continuation,
    # interrupted, is queued again and goes on from the same checkpoint.
    requeued = {int(t.system_attrs.get("failed_trial", t.number)) for t in trials if t.state.name == "WAITING"}
    assert set(seen) <= set(paused) | requeued, (sorted(seen), sorted(paused), sorted(requeued))
    missing = [n for n in {*seen, *paused} if not (root / f"trial-{n}").is_dir()]
    assert not missing, f"Ctrl-C deleted the checkpoints of paused trials {missing}"
    again = cli(*args, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = watch.trials()
    _check_after(trials, 8, resumed=False)  # none may have earned it: checked trial by trial below
    # Each trial paused at the interrupt was resumed from its checkpoint, or never earned it.
    resumed = {t.user_attrs["resumed_from"]: t for t in trials if "resumed_from" in t.user_attrs}
    values = logical_values(trials)
    for number, attempt in paused.items():
        if attempt.number in resumed:
            assert resumed[attempt.number].user_attrs.get("resumed_from_epoch", 0) >= attempt.user_attrs["paused_at"]
        else:
            assert number not in top_at(values, attempt.user_attrs["paused_at"], 2), f"trial {number} not resumed"
    assert not list(root.glob("trial-*")), "checkpoints were left behind"
