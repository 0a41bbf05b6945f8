"""The suite runs files side by side (``-n 2``), and a test marked ``exclusive`` runs alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

TIMED = """
import time, pytest
def record(name, seconds):
    start = time.time()
    time.sleep(seconds)
    with open({log!r}, "a") as log:
        log.write(f"{{name}} {{start}} {{time.time()}}\\n")
"""


@pytest.mark.slow
def test_an_exclusive_test_runs_alone_while_the_others_run_side_by_side(tmp_path):
    log = tmp_path / "intervals.log"
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    exclusive: runs alone\n")
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nfrom suite_lock import pytest_runtest_protocol  # noqa\n"
    )
    (tmp_path / "test_alone.py").write_text(
        TIMED.format(log=str(log))
        + "@pytest.mark.exclusive\n@pytest.mark.parametrize('i', range(3))\ndef test_x(i): record(f'alone-{i}', 0.3)\n"
    )
    for name in ("a", "b", "c"):
        (tmp_path / f"test_beside_{name}.py").write_text(
            TIMED.format(log=str(log))
            + f"@pytest.mark.parametrize('i', range(10))\ndef test_y(i): record(f'{name}-{{i}}', 0.2)\n"
        )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in log.read_text().splitlines()]
    intervals = [(name, float(start), float(end)) for name, start, end in rows]
    assert len(intervals) == 33

    def overlapping(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
        return a[0] != b[0] and a[1] < b[2] and b[1] < a[2]

    alone = [i for i in intervals if i[0].startswith("alone")]
    assert [(a[0], b[0]) for a in alone for b in intervals if overlapping(a, b)] == []
    # The others did run side by side, so the lock, not a single process, kept the exclusive ones alone.
    others = [i for i in intervals if not i[0].startswith("alone")]
    assert any(overlapping(a, b) and a[0][0] != b[0][0] for a in others for b in others)
