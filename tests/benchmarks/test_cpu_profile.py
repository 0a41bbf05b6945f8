"""benchmarks/cpu_profile.py: every thread's CPU, each by its own clock, and the steps it reports."""

from __future__ import annotations

import pstats
import subprocess
import sys
import textwrap
from pathlib import Path

from benchmarks import cpu_profile

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import queue, threading, time

def spin(n):
    total = 0
    for i in range(n):
        total += i
    return total

def waiter(q):  # a daemon thread still waiting when the process exits
    while True:
        q.get()

def worker():
    spin(3_000_000)

threading.Thread(target=waiter, args=(queue.Queue(),), daemon=True).start()
sleeper = threading.Thread(target=time.sleep, args=(0.5,))  # waits: no CPU
sleeper.start()
thread = threading.Thread(target=worker)
thread.start()
thread.join()
sleeper.join()
spin(3_000_000)
"""


def _cumulative(stats: pstats.Stats, name: str) -> float:
    return sum(row[3] for key, row in stats.stats.items() if key[2] == name)  # type: ignore[attr-defined]


def test_each_thread_is_timed_by_its_own_cpu_clock(tmp_path) -> None:
    (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAM))
    out = tmp_path / "out.prof"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu_profile.py"), str(out), "-m", "program"],
                   cwd=tmp_path, check=True, timeout=120)  # fmt: skip
    stats = pstats.Stats(str(out))
    spin = _cumulative(stats, "spin")
    assert spin > 0.05  # both spins, the main thread's and the worker thread's, are there
    assert _cumulative(stats, "worker") > 0.3 * spin  # a thread's own CPU, in its own profile
    # Waiting costs nothing: the sleeping thread, and the daemon still waiting at exit, whose open
    # call is closed by the main thread (timed by the waiter's clock, not the main thread's).
    assert _cumulative(stats, "sleep") < 0.05
    assert _cumulative(stats, "waiter") < 0.05


def test_phases_gives_each_step_per_trial_with_its_costliest_callees(tmp_path, monkeypatch) -> None:
    program = tmp_path / "steps.py"
    program.write_text("def spin(n):\n    return sum(range(n))\n\ndef claim():\n    spin(2_000_000)\n\n"
                       "for _ in range(4):\n    claim()\n")  # fmt: skip
    out = tmp_path / "out.prof"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu_profile.py"), str(out), "-m", "steps"],
                   cwd=tmp_path, check=True, timeout=120)  # fmt: skip
    monkeypatch.setattr(cpu_profile, "PHASES", [("claim", "steps.py", "claim")])
    rows = cpu_profile.phases(cpu_profile.merged([out]), trials=4, callees=1)
    (label, per_trial), (callee, callee_ms) = rows
    assert label == "claim" and per_trial > 0
    assert callee.strip().startswith("spin ") and 0.5 * per_trial < callee_ms <= per_trial
