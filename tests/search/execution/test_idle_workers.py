"""Idle workers: a worker that finds nothing to claim sleeps out its poll unless its starter wakes it,
and `search start` wakes the idle siblings of a worker that exited, and replaces one that stalled."""

from __future__ import annotations

from search.execution import _machine


def test_an_idle_worker_rechecks_the_study_as_soon_as_its_starter_wakes_it(tmp_path, monkeypatch):
    """`search start` grows its wake file when one of its workers has exited, having found nothing
    left to claim: an idle sibling then claims again at once (and exits) instead of sleeping out its
    poll, which the study's end would wait for. Without a wake file it sleeps the poll out."""
    import threading
    import time

    wake = tmp_path / "wake"
    wake.write_bytes(b"")
    monkeypatch.setenv(_machine.ENV_WAKE, str(wake))
    waker = threading.Timer(0.3, lambda: wake.write_bytes(b"."))
    waker.start()
    started = time.monotonic()
    _machine.idle_wait(120)
    waker.join()
    assert time.monotonic() - started < 60  # woken, not the 120 s poll

    monkeypatch.delenv(_machine.ENV_WAKE)
    started = time.monotonic()
    _machine.idle_wait(0.3)
    assert time.monotonic() - started >= 0.3


def test_when_one_local_worker_exits_its_idle_siblings_are_woken():
    """A worker exits when it found nothing to claim and nothing running: the study is over, and
    the command's wait for its workers must not wait out the others' poll."""
    import subprocess
    import sys
    import time

    from search.execution import wait_for_workers

    _, env = _machine.worker_command(None, 0, 2, [], False)
    _, other = _machine.worker_command(None, 1, 2, [], False)
    assert env[_machine.ENV_WAKE] == other[_machine.ENV_WAKE]  # one file for the starter's workers
    idle = "from search.execution._machine import idle_wait; idle_wait(120)"  # a worker waiting for its poll
    procs = [subprocess.Popen([sys.executable, "-c", idle], env=env),
             subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"], env=other)]  # fmt: skip
    started = time.monotonic()
    assert wait_for_workers(procs, lambda: None) == [0, 0]
    assert time.monotonic() - started < 60  # woken when its sibling exited, not after its 120 s poll


class _ExitsBetweenLooks:
    """A worker process as ``wait_for_workers`` sees it: running at its first look, then exited
    with ``code`` (it ended right after that look)."""

    def __init__(self, code: int) -> None:
        self._looks = [None, code]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.returncode = self._looks.pop(0) if len(self._looks) > 1 else self._looks[0]
        return self.returncode


def test_a_worker_that_ends_stalled_between_two_looks_is_restarted():
    """A worker exits after failing a stalled trial just after the command looked at it: it is
    replaced all the same (once it was counted as done, and the retry found no worker: CI, once)."""
    import subprocess
    import sys

    from search.execution import EXIT_STALLED, wait_for_workers

    restarted = []

    def restart(index: int, _exited: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        restarted.append(index)
        return subprocess.Popen([sys.executable, "-c", "pass"])

    assert wait_for_workers([_ExitsBetweenLooks(EXIT_STALLED)], lambda: None, restart) == [0]
    assert restarted == [0]
