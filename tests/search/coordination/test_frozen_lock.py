"""A process that freezes inside the study lock (SIGSTOP, a node that lost its network) on the real
PostgreSQL server: nobody waits for it longer than about one grace period, heartbeats never wait
for the lock, and when it wakes it writes nothing the others have not already decided."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from search_helpers import FROZEN_CLAIM, LOCK_GRACE_S, sleep_study_coordinator, stopped, wait_for

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[3]

# A worker that claims a trial and stops itself in the middle of telling it, its trial's row locked
# (``storage.finish_trial``'s transaction, at the sampler's hook): ``python -c FROZEN_TELL URL NAME``
# prints "frozen", stops, and once woken prints the state its retried tell found the trial in.
FROZEN_TELL = textwrap.dedent(
    """
    import os, signal, sys
    import storage
    from optuna.trial import TrialState
    from search.coordination import Coordinator, retrying

    def freeze_once(trial, values):
        if not os.environ.get("THAWED"):
            os.environ["THAWED"] = "1"
            print("frozen", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)

    coordinator = Coordinator(sys.argv[1], sys.argv[2])
    study = coordinator.load()
    trial, counts = coordinator.claim(study)
    tell = lambda: storage.finish_trial(coordinator.storage, trial._trial_id, TrialState.COMPLETE, 0.5, {}, freeze_once)
    found = retrying(tell, "finishing the trial")
    print("found", None if found is None else found.state.name, flush=True)
    """
)


@pytest.mark.slow
def test_a_worker_frozen_inside_the_lock_stops_nobody_and_does_no_damage_when_it_wakes(pg_url):
    from optuna.trial import TrialState

    coordinator, study = sleep_study_coordinator(pg_url, "frozen", trials=2)
    child = subprocess.Popen(
        [sys.executable, "-c", FROZEN_CLAIM, pg_url, "frozen"], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(lambda: stopped(child.pid), 60, "the claim to freeze inside the lock")
        claimed: list[int | None] = []

        def claim_the_budget() -> None:
            for _ in range(3):
                trial, _counts = coordinator.claim(study)
                claimed.append(None if trial is None else trial.number)

        live = threading.Thread(target=claim_the_budget, daemon=True)
        live.start()
        # The server ends the frozen holder's transaction after the hold time (the grace period).
        live.join(timeout=LOCK_GRACE_S + 30)
        assert not live.is_alive(), "a live worker is still waiting for a lock held by a frozen one"
        assert claimed == [0, 1, None]  # the whole budget went to the live worker
    finally:
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.splitlines() == ["frozen", "claimed None"], err  # woke, found the budget spent
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == [0, 1]  # nothing created behind the others' backs
    assert all(t.state == TrialState.RUNNING for t in trials)


@pytest.mark.slow
def test_a_worker_frozen_while_it_writes_its_trial_does_not_keep_the_trial_from_being_reaped(pg_url):
    """Frozen in the middle of a write (its trial's row locked FOR UPDATE), a worker holds that row
    for as long as it stays frozen unless the server ends its transaction: the reaper, study lock
    held, waited on the row (and every claim behind it) until ``--db-outage-limit`` ran out. The
    server now ends a transaction silent for one grace period: the trial is reaped, its retry
    queued, and the woken worker finds the trial failed and writes nothing."""
    coordinator, study = sleep_study_coordinator(pg_url, "frozenwrite", trials=2)
    child = subprocess.Popen(
        [sys.executable, "-c", FROZEN_TELL, pg_url, "frozenwrite"], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(lambda: stopped(child.pid), 60, "the tell to freeze with its trial's row locked")
        time.sleep(LOCK_GRACE_S + 1.5)  # its trial never beats: dead
        reaped: list[int] = []
        reaper = threading.Thread(target=lambda: reaped.extend(t.number for t in coordinator.reap(study)), daemon=True)
        reaper.start()
        reaper.join(timeout=LOCK_GRACE_S + 30)
        assert not reaper.is_alive(), "the reaper is still waiting for the row a frozen worker holds"
        assert reaped == [0]
        [retry] = [t for t in study.get_trials(deepcopy=False) if t.number != 0]
        assert retry.state.name == "WAITING" and retry.system_attrs["failed_trial"] == 0
    finally:
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.splitlines() == ["frozen", "found FAIL"], err  # woke, its write undone, the trial reaped
    frozen = study.get_trials(deepcopy=False)[0]
    assert frozen.state.name == "FAIL" and frozen.values is None
    assert frozen.user_attrs["fail_reason"].startswith("worker lost")


@pytest.mark.slow
def test_a_heartbeat_thread_never_waits_for_the_study_lock(pg_url):
    """With a dead trial to reap and the lock held elsewhere, the heartbeat's reaping pass skips."""
    import storage

    coordinator, study = sleep_study_coordinator(pg_url, "busy", trials=2)
    dead, _ = coordinator.claim(study)
    time.sleep(LOCK_GRACE_S + 1.5)  # it never beats again: dead
    holding, release, released = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        engine = storage.create_engine(pg_url)
        with storage.study_lock(engine, pg_url, "busy"):
            holding.set()
            release.wait(60)
        released.set()
        engine.dispose()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert holding.wait(30)
    try:
        coordinator.reap_once(study)  # before the fix: blocked until the holder let go
        assert not released.is_set()
    finally:
        release.set()
        holder.join(30)
    assert study.get_trials(deepcopy=False)[0].state.name == "RUNNING"  # skipped, not reaped
    assert [t.number for t in coordinator.reap(study)] == [dead.number]  # a waiting reaper does reap


def test_a_claimed_trial_starts_at_the_time_optuna_would_record_whatever_the_nodes_time_zone(pg_url, monkeypatch):
    """The claim writes its trial itself (on the lock's connection): its start time must be stored as
    Optuna stores it (naive UTC), or every duration is off by the node's UTC offset."""
    from datetime import datetime

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        coordinator, study = sleep_study_coordinator(pg_url, "tz", trials=2)
        before = datetime.now()
        trial, _ = coordinator.claim(study)
        started = coordinator.storage.get_trial(trial._trial_id).datetime_start  # local time, as Optuna reads it
        assert abs((started - before).total_seconds()) < 60, (started, before)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.slow
def test_a_claim_waiting_on_a_row_another_session_holds_frees_the_lock_within_the_grace_period(pg_url, caplog):
    """A session outside the study lock (psql, a migration) holds the study's row: the claimer that
    holds the study lock waits on it, but only one grace period (lock_timeout), then lets the lock
    go and tries again; once the row is free, the claim goes through and the budget stays exact."""
    import sqlalchemy

    import storage

    coordinator, study = sleep_study_coordinator(pg_url, "rowheld", trials=1)
    outside = storage.create_engine(pg_url)
    held = outside.connect()
    held.execute(sqlalchemy.text("SELECT * FROM studies WHERE study_id = :sid FOR UPDATE"), {"sid": study._study_id})
    claimed: list[int | None] = []
    claimer = threading.Thread(target=lambda: claimed.append(coordinator.claim(study)[0].number), daemon=True)
    other, waited = storage.create_engine(pg_url), []

    def take_the_lock() -> None:  # as the next worker's claim would
        started = time.monotonic()
        with storage.study_lock(other, pg_url, "rowheld"):
            waited.append(time.monotonic() - started)

    try:
        claimer.start()
        deadline = time.monotonic() + 30
        row_wait = "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype <> 'advisory'"
        while not held.execute(sqlalchemy.text(row_wait)).scalar():  # the claimer now waits on the row
            assert time.monotonic() < deadline, "the claim never waited on the held row"
            time.sleep(0.05)
        waiter = threading.Thread(target=take_the_lock, daemon=True)
        waiter.start()
        waiter.join(timeout=LOCK_GRACE_S + 20)
        assert waited, "the study lock stayed held past the grace period by a claimer waiting on a row"
        assert waited[0] < LOCK_GRACE_S + 5, waited  # a bound, with slack for a loaded machine
        assert claimer.is_alive() and not claimed  # still trying: the row is still held
    finally:
        held.rollback()
        held.close()
    claimer.join(timeout=60)
    assert claimed == [0]
    assert [t.number for t in study.get_trials(deepcopy=False)] == [0]
    assert "the study's rows locked by another session while claiming a trial" in caplog.text
    other.dispose()
    outside.dispose()
