"""CPU profiles of benchmark processes, every thread, and where a trial's CPU goes.

Run a module under it: ``python benchmarks/cpu_profile.py OUT.prof -m search worker ...``. Every
thread (the main one, and MLflow's writer, heartbeats, watchdog as they start) gets a cProfile
timed by its own CPU clock, not the wall clock: with many processes on few
cores, waiting for a core is not cost. The merged profile is written to ``OUT.prof`` at exit (the
``search`` entry point runs the exit handlers before it ends the process).

:func:`phases` reads such profiles and splits the CPU of the trials into the steps of a trial.
"""

from __future__ import annotations

import atexit
import cProfile
import functools
import os
import pstats
import runpy
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

PHASES = [
    # (label, file ending, function): the cumulative CPU of each, every call in every thread. The
    # steps are the functions inside the retry wrappers, so that their callees say what they do.
    ("claim", "search/coordination/_coordinator.py", "claim"),
    ("  reap dead trials", "search/coordination/_coordinator.py", "reap"),
    ("  lock, count, create the trial", "search/coordination/_coordinator.py", "_take"),
    ("  heartbeat row, read the study", "search/coordination/_coordinator.py", "open_trial"),
    ("MLflow run created, trial attrs", "search/execution/_trial.py", "_start_run"),
    ("suggest (sampler, params stored)", "search/execution/_suggest.py", "suggest"),
    ("trainer.fit, all of it", "trainer/_loop.py", "fit"),
    ("  set-up (model, optimizer, Accelerate)", "trainer/_loop.py", "_setup"),
    ("  epochs", "trainer/_loop.py", "_train_epoch"),
    ("  pruner reports", "search/execution/_pruning.py", "report"),
    ("  checkpoints", "trainer/_checkpoint.py", "save"),
    ("finish: tell", "search/execution/_finish.py", "tell"),
    ("MLflow writes (writer thread)", "search/tracking/_tracker.py", "<lambda>"),
    ("heartbeats (thread)", "search/coordination/_liveness.py", "keep_alive"),
    ("watchdog (thread)", "search/execution/_watchdog.py", "_watch"),
]


def _profile_every_thread(out: Path) -> None:
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start() -> None:
        # This thread's CPU clock, read from whichever thread calls it: at exit the main thread
        # closes the calls still open in the others (a writer waiting for work), and must time
        # them by their own thread's clock, not its own.
        # (A C-level partial: a Python timer would cost more than most of what it times.)
        timer = functools.partial(time.clock_gettime, time.pthread_getcpuclockid(threading.get_ident()))
        profile = cProfile.Profile(timer)
        with lock:
            profiles.append(profile)
        profile.enable()

    def start_in_thread(*_: object) -> None:  # the first event of a new thread hands over to its own profile
        sys.setprofile(None)
        start()

    def dump() -> None:
        for profile in profiles:
            profile.disable()
        stats = pstats.Stats(profiles[0])
        for profile in profiles[1:]:
            try:
                stats.add(profile)
            except TypeError:  # a thread that never ran a profiled call
                continue
        stats.dump_stats(str(out))

    atexit.register(dump)
    threading.setprofile(start_in_thread)
    start()


def merged(paths: Iterable[Path]) -> pstats.Stats | None:
    """The profiles ``paths`` as one (those missing or empty left out), or None if there are none."""
    files = [str(p) for p in paths if p.exists() and p.stat().st_size]
    return pstats.Stats(*files) if files else None


def phases(stats: pstats.Stats | None, trials: int, callees: int = 0) -> list[tuple[str, float]]:
    """(label, CPU ms per trial) for each of :data:`PHASES` found in ``stats``; with ``callees``,
    each phase is followed by that many of its costliest callees (labels indented)."""
    if stats is None:
        return []
    stats.calc_callees()
    found = []
    for label, ending, name in PHASES:
        keys = [
            key
            for key in stats.stats  # type: ignore[attr-defined]
            if key[2] == name and key[0].replace("\\", "/").endswith(ending)
        ]
        cumulative = sum(stats.stats[key][3] for key in keys)  # type: ignore[attr-defined]
        if not cumulative:
            continue
        found.append((label, 1000 * cumulative / trials))
        below: dict[tuple[str, int, str], float] = {}
        for key in keys:
            for callee, row in stats.all_callees.get(key, {}).items():  # type: ignore[attr-defined]
                below[callee] = below.get(callee, 0.0) + row[3]
        for (file, line, function), seconds in sorted(below.items(), key=lambda kv: -kv[1])[:callees]:
            where = "/".join(Path(file).parts[-2:]) if file != "~" else ""
            indent = " " * (len(label) - len(label.lstrip()) + 4)
            found.append((f"{indent}{function} {where}:{line}", 1000 * seconds / trials))
    return found


def top(stats: pstats.Stats | None, n: int = 25) -> None:
    """Print the ``n`` functions of ``stats`` with the most CPU of their own."""
    if stats is not None:
        stats.sort_stats("tottime").print_stats(n)


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        sys.exit("usage: python benchmarks/cpu_profile.py OUT.prof -m MODULE [ARGS...]")
    out, module = Path(sys.argv[1]), sys.argv[3]
    sys.argv = [module, *sys.argv[4:]]
    sys.path[0] = os.getcwd()  # as `python -m MODULE` has it, not this script's folder
    _profile_every_thread(out)
    runpy.run_module(module, run_name="__main__", alter_sys=True)
