"""Headless Chromium against what `search` serves and writes, for one small real search.

The search runs once per session (two workers, five trials of three epochs) and every test here
reads it. Screenshots are kept under ``test-artifacts/browser/`` at the repository root. Under
CI (``CI=true``) a missing Chromium, chromedriver or selenium fails these tests instead of skipping them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers module sits next to the tests

from browser_helpers import SmallSearch, search_cli, search_env  # noqa: E402

CHROMIUM = Path(os.environ.get("HPSEARCH_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("HPSEARCH_CHROMEDRIVER", "/usr/bin/chromedriver"))
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1400,1000"]  # fmt: skip
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
SMALL_SEARCH = ["start", "--study", "resmlp", "--trials", "5", "--workers", "2", "--no-retrain",
                "--study-option", "search_epochs=3", "--study-option", "full_epochs=3",
                "--pruner", "median:startup=2,warmup=0"]  # fmt: skip


@pytest.fixture(scope="session")
def small_search(tmp_path_factory: pytest.TempPathFactory) -> SmallSearch:
    workdir = tmp_path_factory.mktemp("small-search")
    search_cli(*SMALL_SEARCH, cwd=workdir)
    return SmallSearch(workdir)


class Server:
    """A `search dashboard`/`search mlflow` process, stopped the way a user stops it (SIGTERM)."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "search", *args], cwd=cwd, env=search_env(), text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        self.lines: list[str] = []
        self.url: str | None = None
        self.announced = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.url is None and ": http://" in line:
                self.url = line.rsplit(": ", 1)[1].strip()
                self.announced.set()
        self.announced.set()

    def wait_for_url(self, timeout: float) -> str:
        self.announced.wait(timeout)
        assert self.url, f"no URL after {timeout:.0f} s:\n{self.output()}"
        return self.url

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """Start a server with `search ARGS`; it is stopped (and must stop cleanly) after the test."""
    servers: list[Server] = []

    def start(args: list[str], cwd: Path) -> Server:
        servers.append(Server(args, cwd))
        return servers[-1]

    yield start
    for server in servers:
        code = server.stop()
        assert code == 0, f"server exited {code} on SIGTERM:\n{server.output()}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Check for Chromium before a browser test sets up anything (the small search takes a while)."""
    if item.get_closest_marker("browser") is None:
        return
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        reason = f"headless Chromium tests need {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if IN_CI:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Any]:
    """A fresh headless Chromium (its own profile) that records the page's console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in [*CHROME_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    browser.set_page_load_timeout(120)
    try:
        yield browser
    finally:
        browser.quit()
