"""`search follow`: the live view of a study that another command runs, from any terminal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLEEP_STUDY = str(Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py")


@pytest.mark.slow
def test_follow_shows_a_running_study_until_it_finishes(tmp_path, cli, warm_cli):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")} | {"PYTHONUNBUFFERED": "1"}
    said = open(tmp_path / "start.out", "w")  # noqa: SIM115
    start = subprocess.Popen(
        [sys.executable, "-m", "search", "start", "--study", SLEEP_STUDY, "--trials", "4", "--workers", "1",
         "--study-option", "epoch_seconds=0.5", "--patience", "off", "--pruner", "none", "--no-retrain"],
        cwd=tmp_path, env=env, stdout=said, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while warm_cli("status", "--study", SLEEP_STUDY, cwd=tmp_path).returncode != 0:  # until the study exists
            assert time.monotonic() < deadline and start.poll() is None
            time.sleep(0.5)
        followed = cli("follow", "--study", SLEEP_STUDY, "--interval", "0.5", cwd=tmp_path, timeout=180)
    finally:
        start.wait(timeout=180)
        said.close()
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert lines[-1].startswith("study 'sleep' finished: 4/4 trials")
    finished = [line for line in lines if line.startswith("trial ") and " COMPLETE " in line]
    assert finished, followed.stdout  # it saw trials finish while it followed
    assert start.returncode == 0
    # search start says what it does from its first line, before its slow imports and checks
    first = (tmp_path / "start.out").read_text().splitlines()[0]
    assert first == f"starting 1 local worker; checking the study {SLEEP_STUDY!r} and opening its storage meanwhile"


def test_follow_on_a_finished_study_says_so_at_once(tmp_path, make_demo, search_main):
    import storage

    project = tmp_path / "project"
    demo = make_demo(storage.sqlite_url(project / "optuna.db"), project, running=False)
    from search.coordination import Coordinator

    coordinator = Coordinator.existing(demo.url, demo.name)
    coordinator.load().set_user_attr("hpsearch.budget", coordinator.counts().finished_logical)
    code, out, err = search_main(["follow", *demo.flags()])
    assert code == 0, err
    assert out.splitlines()[-1].startswith("study 'demo' finished:")
