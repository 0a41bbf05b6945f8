"""Signals that stop a command as Ctrl-C does, and the exit code each leaves: 128 + its number.

A scheduler, systemd or ``docker stop`` sends SIGTERM, a closed terminal or SSH session SIGHUP:
``search start`` stops its local workers for them as for Ctrl-C (their running trials are queued
again, and the same command resumes the study), then exits 143 or 129 (130 for Ctrl-C), the
codes a shell gives a process those signals ended.
"""

from __future__ import annotations

import signal
from typing import Any

STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []


def stop_on_signals() -> None:
    """From now on SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, once."""
    for signum in STOPPING:
        signal.signal(signum, _interrupt_once)


def _interrupt_once(signum: int, _frame: Any) -> None:
    # The clean-up the first one starts (workers told to stop, waited for, then killed) must not be
    # cut short by a second: a terminal's Ctrl-C, `docker stop`'s SIGTERM to every process, a retry.
    for each in STOPPING:
        signal.signal(each, signal.SIG_IGN)
    _received.append(signum)
    raise KeyboardInterrupt


def interrupted_exit_code() -> int:
    """128 + the signal that stopped this command: 130 for Ctrl-C (or none seen), 143 SIGTERM, 129 SIGHUP."""
    return 128 + (_received[0] if _received else signal.SIGINT)
