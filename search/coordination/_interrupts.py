"""Ctrl-C held back across statements that must not be cut in two: a trial made RUNNING, and its
worker noting that it took it.

A worker stopped by Ctrl-C (or SIGTERM, SIGHUP) queues its running trial again; it finds the trial
by what it noted. An interrupt between the commit and the note would leave a RUNNING trial nobody
queues again (until a reaper finds it dead, spending one of its retries).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the body with SIGINT, SIGTERM and SIGHUP held back; the first that came meanwhile is then
    handled as if it arrived as the body ends (its handler raises ``KeyboardInterrupt`` there).

    Only signals that Python handles are held: one that the process ignores stays ignored, and one
    that ends it at once (SIGTERM by default) still does. Python runs its handlers in the main
    thread only, so elsewhere the body runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    handlers: dict[int, Any] = {signum: h for signum in HELD if callable(h := signal.getsignal(signum))}
    holding = [True]

    def hold(signum: int, frame: Any) -> None:
        if holding[0]:
            held.append(signum)
        else:  # the body is over: a handler not yet put back hands the signal on
            handlers[signum](signum, frame)

    for signum in handlers:
        signal.signal(signum, hold)
    try:
        yield
    finally:
        holding[0] = False
        for signum, handler in handlers.items():
            if signal.getsignal(signum) is hold:  # else the body or its handler put another one there
                signal.signal(signum, handler)
        if held:
            handlers[held[0]](held[0], None)
