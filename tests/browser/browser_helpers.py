"""What the browser tests share: running `search`, waiting on pages, keeping screenshots."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"


@dataclass(frozen=True)
class SmallSearch:
    workdir: Path
    """Where `search start` ran: its embedded stores are in ``workdir/.search``."""
    name: str = "resmlp"
    trials: int = 5

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.workdir / '.search' / 'mlflow.db'}"


def search_env() -> dict[str, str]:
    """This environment without SEARCH_* settings: a test's flags alone say where a study is."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    return base | {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def search_cli(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m search ARGS`` as a user runs it; fails the test with its output on a non-zero exit."""
    proc = subprocess.run([sys.executable, "-m", "search", *args], cwd=cwd, env=search_env(), capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    assert proc.returncode == 0, f"search {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_text(driver: Any, *texts: str, timeout: float = 60) -> str:
    """Wait until the page's visible text holds every one of ``texts``; returns that text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def body(d: Any) -> str:
        return str(d.find_element(By.TAG_NAME, "body").text)

    try:
        WebDriverWait(driver, timeout).until(lambda d: all(t in body(d) for t in texts))
    except TimeoutException:
        screenshot(driver, "timeout")
        missing = [t for t in texts if t not in body(driver)]
        raise AssertionError(f"page {driver.current_url} never showed {missing}") from None
    return body(driver)


def screenshot(driver: Any, name: str, full_page: bool = False, width: int = 1400) -> Path:
    """Keep a PNG of the page under ``test-artifacts/browser/`` (the whole page, ``width`` wide, when ``full_page``)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    if full_page:
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        driver.set_window_size(width, min(height + 100, 12000))
        time.sleep(0.5)  # let plotly's responsive layout settle at the new size
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
