"""``benchmarks/bench_trainer.py`` runs end to end on a tiny shape and prints both ratios; bad flags are one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_trainer.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          cwd=SCRIPT.parents[1])  # fmt: skip


@pytest.mark.slow
def test_a_tiny_run_prints_each_clock_with_both_ratios():
    proc = _run("--epochs", "1", "--repeats", "2", "--rows", "256", "--batch", "32", "--width", "16",
                "--threads", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "batch=32 width=16" in proc.stdout
    assert len(re.findall(r"^repeat \d: baseline", proc.stdout, re.M)) == 2
    for clock in ("wall", " cpu"):
        line = next(x for x in proc.stdout.splitlines() if x.startswith(f"{clock} clock"))
        assert re.search(r"ratio trainer/baseline \d+\.\d\dx \(median of per-repeat ratios \d+\.\d\dx\)", line), line


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--mixed-precision", "fp16"], "--mixed-precision fp16 needs --device cuda"),
        (["--batch", "0"], "must be >= 1"),
        (["--rows", "10", "--batch", "64"], "--rows at least --batch"),
    ],
)
def test_bad_flags_are_one_line(args, fragment):
    proc = _run(*args)
    assert proc.returncode == 2
    assert fragment in proc.stderr.strip().splitlines()[-1]
