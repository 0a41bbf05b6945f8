"""The `search` process ends without tearing the interpreter down, but as a normal exit would."""

from __future__ import annotations

import subprocess
import sys

EXITS_WITH_A_THREAD_POOL = """
import concurrent.futures, sys
from search.cli import run
pool = concurrent.futures.ThreadPoolExecutor(1)  # its worker thread is not a daemon; nobody shut it down
pool.submit(print, "pool", flush=True).result()
sys.argv = ["search", "--help"]
run()
"""

WRITES_A_LOG_AND_AN_EXIT_CODE = """
import atexit, logging, sys
from search.cli import run
logging.basicConfig(filename=sys.argv[1], level=logging.INFO)
logging.getLogger("x").info("written before the exit")
atexit.register(lambda: print("exit handler ran", flush=True))
sys.argv = ["search", "start", "--study", "nope", "--trials", "1"]
run()
"""


def test_an_idle_thread_pool_does_not_hold_the_exit():
    done = subprocess.run([sys.executable, "-c", EXITS_WITH_A_THREAD_POOL], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pool\nUsage: search")


def test_exit_handlers_run_logs_are_flushed_and_the_exit_code_kept(tmp_path):
    log = tmp_path / "log.txt"
    done = subprocess.run([sys.executable, "-c", WRITES_A_LOG_AND_AN_EXIT_CODE, str(log)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "unknown study 'nope'" in done.stderr
    assert "exit handler ran" in done.stdout
    assert "written before the exit" in log.read_text()
