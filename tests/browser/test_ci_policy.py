"""Under CI a machine without Chromium must fail the browser tests: a skip there would pass unseen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(("ci", "outcome", "code"), [("true", "1 error", 1), ("", "1 skipped", 0)])
def test_missing_chromium_fails_under_ci_and_skips_elsewhere(ci, outcome, code, tmp_path):
    env = {**os.environ, "CI": ci, "HPSEARCH_CHROMIUM": str(tmp_path / "no-chromium")}
    one_test = f"{HERE / 'test_report_page.py'}::test_report_renders_every_figure_without_console_errors"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", one_test,
         "-p", "no:cacheprovider", "-q", "-n", "0",
         "--rootdir", str(HERE.parents[1])],
        cwd=HERE.parents[1], env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert outcome in proc.stdout and proc.returncode == code, proc.stdout
    assert "no-chromium" in proc.stdout  # the message names what is missing
