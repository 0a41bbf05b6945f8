"""Which local workers that exited are started again, so that a fault does not end a live study.

A worker that failed a stalled trial exits :data:`EXIT_STALLED` by design (its hung thread cannot
be stopped): it is always replaced, and each such exit costs one attempt of one trial, so these
restarts end with the budget. A worker killed by a signal (the OOM killer's SIGKILL, a segfault)
or ended by an uncaught error (exit 1) is replaced while the study is live, up to
:data:`MAX_FAULTS` times in a row without finishing a trial of its own, so that a crash loop ends.
Bad input (2), a database outage (75), a stop someone asked for (130, 143) and any other code are
not retried: starting the same worker again would meet the same answer.
"""

from __future__ import annotations

import logging
import subprocess
from collections import defaultdict
from collections.abc import Callable

from search.execution._watchdog import EXIT_STALLED

log = logging.getLogger(__name__)

MAX_FAULTS = 3
"""Restarts of one local worker in a row whose predecessor died without finishing a trial."""


def is_fault(code: int) -> bool:
    """A worker's exit that says nothing about the input: a signal, an uncaught error, a stalled trial."""
    return code < 0 or code in (1, EXIT_STALLED)


class Restarts:
    """``restarts(index, proc)``: a fresh worker in place of ``proc`` (exited), or None.

    ``spawn(index)`` starts one; ``live()`` says whether the study still needs workers (None: only
    stalled workers are replaced); ``finished(pid, index)`` whether the worker that ran as ``pid``
    finished a trial (its crash loop, if any, is then broken).
    """

    def __init__(self, spawn: Callable[[int], subprocess.Popen[bytes]], live: Callable[[], bool] | None = None,
                 finished: Callable[[int, int], bool] | None = None, limit: int = MAX_FAULTS) -> None:  # fmt: skip
        self.spawn, self.live, self.finished, self.limit = spawn, live, finished, limit
        self.faults: defaultdict[int, int] = defaultdict(int)

    def __call__(self, index: int, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes] | None:
        code = proc.returncode
        if code == EXIT_STALLED:
            log.warning("worker %d ended after failing a stalled trial (exit code %d); starting a fresh one",
                        index, EXIT_STALLED)  # fmt: skip
            return self.spawn(index)
        if self.live is None or not is_fault(code) or not self.live():
            return None
        if self.finished is not None and self.finished(proc.pid, index):
            self.faults[index] = 0
        self.faults[index] += 1
        if self.faults[index] > self.limit:
            log.warning("worker %d died again (%s) without finishing a trial, %d times in a row; not starting "
                        "it again", index, describe(code), self.faults[index])  # fmt: skip
            return None
        log.warning("worker %d died (%s) with the study unfinished; starting a fresh one (%d of %d in a row)",
                    index, describe(code), self.faults[index], self.limit)  # fmt: skip
        return self.spawn(index)


def describe(code: int) -> str:
    """``killed by SIGKILL`` for a negative return code, else ``exit code N``."""
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
