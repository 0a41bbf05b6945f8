"""The packages type-check: mypy (configured in ``pyproject.toml``) finds no error in them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_packages_type_check() -> None:
    """A mistake mypy sees (an attribute of a value that may be ``None``, a wrong argument type) fails
    here, not in a user's run. The cache under the project's ``.mypy_cache`` makes a rerun fast."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "search", "trainer", "storage", "studies"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
