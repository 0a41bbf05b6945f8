"""Running the suite's files side by side, with the tests that change the ground under the others alone.

The suite runs on two processes (pytest-xdist: ``-n 2 --dist loadfile`` in pyproject.toml), one file
at a time each. A test marked ``exclusive`` changes what every other test stands on (it restarts the
PostgreSQL server) or assumes an idle machine (stall limits of a few seconds, Slurm's cancel): it
waits for the test running beside it to end, and runs alone. The lock is a readers-writer lock on two
files: a waiting exclusive test holds the gate, so the other process cannot start test after test and
keep it waiting for ever. ``tests/conftest.py`` installs the hook.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # The run's id from xdist's own channel, not the environment: a pytest that a test starts inherits that.
    run = getattr(item.config, "workerinput", {}).get("testrunuid")
    if not run:  # one process: nothing runs beside the test
        yield
        return
    exclusive = item.get_closest_marker("exclusive") is not None
    base = Path(tempfile.gettempdir()) / f"hpsearch-tests-{run}"
    with open(f"{base}.gate", "a") as gate, open(f"{base}.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
