"""Following a running search: the live view on a terminal, plain lines otherwise."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Protocol

from search.observation._progress import snapshot

if TYPE_CHECKING:
    from search.coordination import Coordinator


class Follower(Protocol):
    """Called about once a second while a search runs, then closed once."""

    def __call__(self) -> None: ...

    def close(self) -> None: ...


class PlainFollower:
    """Prints a line whenever the counts change (for logs and non-terminal output)."""

    def __init__(self, coordinator: Coordinator, quiet: bool = False) -> None:
        self.coordinator = coordinator
        self.quiet = quiet
        self.started = time.time()
        self.last = ""

    def __call__(self) -> None:
        if self.quiet:
            return
        try:
            line = snapshot(self.coordinator, self.started).line()
        except Exception as exc:  # a database blip must not stop following
            line = f"(cannot read study: {type(exc).__name__})"
        key = line.split(", best")[0]
        if key != self.last:
            print(line, flush=True)
            self.last = key

    def close(self) -> None:
        pass


def make_follower(coordinator: Coordinator, quiet: bool) -> Follower:
    """The live view on a terminal, plain lines otherwise, nothing at all when ``quiet``."""
    if quiet or not _is_terminal():
        return PlainFollower(coordinator, quiet)
    from search.observation._live import LiveFollower

    return LiveFollower(coordinator)


def _is_terminal() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb"
