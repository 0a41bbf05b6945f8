"""A running trial's liveness: a heartbeat thread that also reaps the study's dead trials."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import storage as st
from search.coordination._resilience import attempt

if TYPE_CHECKING:
    import optuna

    from search.coordination._coordinator import Coordinator

log = logging.getLogger(__name__)


@contextmanager
def heartbeat(coordinator: Coordinator, study: optuna.Study, trial: optuna.trial.Trial) -> Iterator[None]:
    """Record ``trial``'s heartbeat in a thread while the block runs, whatever API runs the trial."""
    if not coordinator.storage.get_heartbeat_interval():
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(
        target=keep_alive, args=(coordinator, study, trial, stop), name=f"heartbeat-{trial.number}", daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def keep_alive(coordinator: Coordinator, study: optuna.Study, trial: optuna.trial.Trial, stop: threading.Event) -> None:
    """A running trial's heartbeat thread: beat every interval, reap dead trials about twice per grace period.

    Runs until ``stop`` is set. A lost connection is logged once (see ``_resilience``) and
    tried again at the next beat; it never stops training. Reaping here means a dead trial is
    failed and retried even while every live worker is busy training.
    """
    storage = coordinator.storage
    interval = float(storage.get_heartbeat_interval() or 0)
    every = max(interval, (storage.grace_period or 2 * interval) / 2)
    next_reap = time.monotonic() + every
    beat = f"recording the heartbeat of trial {trial.number}"
    while True:
        try:
            attempt(lambda: storage.record_heartbeat(st.trial_id(trial)), beat)
            if time.monotonic() >= next_reap:
                next_reap = time.monotonic() + every
                attempt(lambda: coordinator.reap_once(study), "reaping")
        except Exception as exc:  # noqa: BLE001 - nothing here may kill training
            log.warning("heartbeat of trial %d: %s", trial.number, exc)
        if stop.wait(interval):
            return
