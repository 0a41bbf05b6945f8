"""Early workers join a new study before its MLflow parent run exists (``search start`` creates it
while their first trials train): their runs wait for it, and a parent run that cannot be made ends
them and removes the study."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

SLEEP_STUDY = Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py"


def _new_study(tmp_path: Path, epoch_seconds: float, trials: int = 2):
    """A study as ``search start`` has created it when it releases its early workers: no parent run yet."""
    from search.api import StartOptions, prepare, resolve_locations
    from search.coordination import Coordinator
    from search.settings import SearchSettings

    loc = resolve_locations(storage=None, tracking_uri=None, artifact_location=None, project_dir=tmp_path)
    loc.project_dir.mkdir(parents=True, exist_ok=True)
    opts = StartOptions(study=str(SLEEP_STUDY), trials=trials, settings=SearchSettings(pruner="none"),
                        study_options={"epoch_seconds": epoch_seconds, "epochs": 3})  # fmt: skip
    optuna_study, created = Coordinator(loc.storage_url, "sleep").create_or_resume(prepare(opts).record, trials)
    assert created
    return loc, optuna_study


@pytest.mark.slow
def test_trials_of_a_worker_joined_before_the_parent_run_train_at_once_and_get_their_runs_under_it(tmp_path):
    from search.coordination import PARENT_RUN_ATTR
    from search.execution import connect
    from search.execution._trial import run_trial
    from search.tracking import open_parent_run

    loc, optuna_study = _new_study(tmp_path, epoch_seconds=0.5)
    ctx = connect(loc, "sleep", "early-worker", early=True)
    assert not ctx.parent.known
    made: list[datetime] = []

    def make_parent() -> None:  # what `search start` does once it has released its workers
        time.sleep(0.8)
        made.append(datetime.now())
        open_parent_run(optuna_study, loc, resumed=False, summary={"study": "sleep"})

    maker = threading.Thread(target=make_parent)
    maker.start()
    outcomes = []
    for _ in range(2):
        trial, _ = ctx.coordinator.claim(ctx.optuna_study)
        outcomes.append(run_trial(ctx, trial))
    maker.join()
    parent = ctx.coordinator.study_user_attrs()[PARENT_RUN_ATTR]
    trials = {t.number: t for t in ctx.optuna_study.get_trials()}
    assert trials[outcomes[0].number].datetime_start < made[0]  # it trained before the parent existed
    for outcome in outcomes:
        stored = trials[outcome.number]
        assert outcome.state == "COMPLETE" and stored.user_attrs["worker"] == "early-worker"
        run = ctx.tracker.client.get_run(stored.user_attrs["mlflow_run_id"])
        assert run.data.tags["mlflow.parentRunId"] == parent
        assert run.info.status == "FINISHED" and "val_loss" in run.data.metrics


def test_a_worker_that_was_not_released_early_needs_the_parent_run(tmp_path):
    from search.exceptions import SearchError
    from search.execution import connect

    loc, _ = _new_study(tmp_path, epoch_seconds=0.0)
    with pytest.raises(SearchError, match="has no MLflow parent run"):
        connect(loc, "sleep", "late-worker")


def test_a_parent_run_that_never_comes_fails_the_trial_instead_of_hanging(tmp_path, monkeypatch):
    """`search start` died between the study and its parent run: the trial fails with one reason
    once the wait is over, and nothing is left RUNNING."""
    from search.coordination._resilience import ENV_OUTAGE_LIMIT
    from search.execution import _context, connect
    from search.execution._trial import run_trial

    monkeypatch.setattr(_context, "PARENT_WAIT_S", 0.5)
    monkeypatch.setenv(ENV_OUTAGE_LIMIT, "0.5")  # the wait is that much longer than the outage limit
    loc, _ = _new_study(tmp_path, epoch_seconds=0.0, trials=1)
    ctx = connect(loc, "sleep", "early-worker", early=True)
    trial, _ = ctx.coordinator.claim(ctx.optuna_study)
    started = time.monotonic()
    outcome = run_trial(ctx, trial)
    assert time.monotonic() - started < 30
    assert outcome.state == "FAIL", outcome
    assert outcome.reason.startswith("MLflow run could not start: the study has no MLflow parent run"), outcome
    assert [t.state.name for t in ctx.optuna_study.get_trials()] == ["FAIL"]


@pytest.mark.slow
def test_a_parent_run_that_cannot_be_made_ends_the_released_workers_and_removes_the_study(cli, tmp_path):
    """The tracking location is unusable (here a path under a file): the early worker was told to
    join the study, then the parent run fails: one line, exit 2, no worker left, no study, no
    checkpoints of its trials."""
    import psutil

    work = tmp_path / "work"
    work.mkdir()
    (work / "afile").write_text("")
    before = {p.pid for p in psutil.process_iter()}
    proc = cli("start", "--study", str(SLEEP_STUDY), "--trials", "3", "--workers", "1", "--no-retrain",
               "--tracking-uri", f"sqlite:///{work}/afile/mlflow.db", cwd=work)  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: MLflow at sqlite:///"), proc.stderr
    assert "could not record the study: FileExistsError" in lines[0]
    import optuna

    assert optuna.get_all_study_names(f"sqlite:///{work}/.search/optuna.db") == []
    assert not (work / ".search" / "checkpoints" / "sleep").exists()
    assert [p for p in psutil.process_iter(["cwd"]) if p.pid not in before and p.info["cwd"] == str(work)] == []


def test_search_start_can_start_its_workers_before_importing_sqlalchemy_optuna_or_torch():
    """`search start` starts its workers as soon as its flags are checked: what that needs stays light,
    so their imports (seconds) overlap the command's own instead of following them."""
    import subprocess
    import sys

    probe = (
        "import sys\nfrom search.api._options import StartOptions, check_flags, start_workers\n"
        "check_flags(StartOptions(study='resmlp', trials=3, workers=0))\n"
        "start_workers(StartOptions(study='resmlp', trials=3, workers=0), debug=False)\n"
        "print(sorted(m for m in ('sqlalchemy', 'optuna', 'torch', 'mlflow', 'studies') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"


@pytest.mark.slow
def test_an_early_worker_joins_where_the_command_resolved_the_study_not_where_its_own_flags_pointed(
    tmp_path, monkeypatch
):
    """An early worker parses its flags before the command has resolved the study's locations; the
    word to join carries them, and they win over what the worker's own environment said."""
    import optuna

    from search.execution import release_workers, spawn_early
    from search.tracking import open_parent_run

    loc, optuna_study = _new_study(tmp_path / "project", epoch_seconds=0.0, trials=2)
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("SEARCH_PROJECT_DIR", str(elsewhere))  # inherited by the worker at its start
    [proc] = spawn_early(1, [], False, None)
    release_workers([proc], "sleep", loc)
    open_parent_run(optuna_study, loc, resumed=False, summary={"study": "sleep"})
    assert proc.wait(timeout=180) == 0, (loc.project_dir / "logs" / "worker-0.log").read_text()[-3000:]
    trials = optuna.load_study(study_name="sleep", storage=loc.storage_url).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert not elsewhere.exists()
    assert "trial 1 COMPLETE" in (loc.project_dir / "logs" / "worker-0.log").read_text()


_AWAIT_PROBE = """
import os, sys, tempfile, threading
from search.execution import _early
from search.tracking import _runlog

os.environ[_early.ENV_EARLY] = tempfile.mkstemp()[1]
join = _early._join


def waiting(temp):
    print("waiting", flush=True)
    return join(temp)


_early._join = waiting
name = _early.await_release()
for thread in threading.enumerate():
    if thread.name == "mlflow-import":  # the background import, if one was started
        thread.join(timeout=120)
mlflow = _runlog._IMPORTED.is_set()
print(name, "sqlalchemy.orm" in sys.modules, mlflow, flush=True)
"""


@pytest.mark.slow
def test_an_early_worker_spends_only_its_wait_on_mlflow_and_the_storage_imports():
    """An early worker whose word is already there when its imports are done joins at once: it does
    not import MLflow first (a thread doing so would take half its time until the claim; the first
    trial's run waits for it instead). One that waits for the word imports meanwhile what comes next."""
    import subprocess
    import sys

    with subprocess.Popen([sys.executable, "-c", _AWAIT_PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as proc:  # fmt: skip
        assert proc.stdin and proc.stdout
        proc.stdin.write("stop\n")  # there before the imports end
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "waiting"
        assert proc.stdout.readline().split() == ["None", "False", "False"]
    assert proc.returncode == 0

    with subprocess.Popen([sys.executable, "-c", _AWAIT_PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as proc:  # fmt: skip
        assert proc.stdin and proc.stdout
        assert proc.stdout.readline().strip() == "waiting"  # the imports are done, no word yet
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        assert proc.stdout.readline().split() == ["None", "True", "True"]
    assert proc.returncode == 0


def test_workers_start_at_once_one_per_core(monkeypatch):
    import os

    from search.execution import start_at_once

    for cores, count, at_once in [(2, 2, 2), (2, 1, 1), (1, 3, 1), (8, 4, 4), (8, 16, 8), (64, 8, 8)]:
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)))
        assert start_at_once(count) == at_once, (cores, count)


@pytest.mark.slow
def test_workers_left_for_later_start_once_the_first_has_claimed_and_take_their_share(tmp_path):
    """On one core, `search start --workers 3` starts one worker with itself and two once it has
    claimed a trial (told to join at once): all three train, each under its own index and log, and the
    budget stays exact."""
    import os
    import subprocess
    import sys

    import optuna

    core = min(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_") and k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        [sys.executable, "-m", "search", "start", "--study", str(SLEEP_STUDY), "--trials", "12", "--workers", "3",
         "--study-option", "epoch_seconds=0.5", "--study-option", "epochs=3", "--pruner", "none", "--no-retrain",
         "--quiet"],
        cwd=tmp_path, env=env | {"OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600,
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    trials = optuna.load_study(study_name="sleep", storage=f"sqlite:///{tmp_path}/.search/optuna.db").get_trials()
    assert len(trials) == 12 and {t.state.name for t in trials} == {"COMPLETE"}
    assert {t.user_attrs["worker"].rsplit(":", 1)[1] for t in trials} == {"0", "1", "2"}
    for index in range(3):
        assert "trial" in (tmp_path / ".search" / "logs" / f"worker-{index}.log").read_text()


def test_workers_left_for_later_wait_for_the_first_ones_claims_or_their_exit(tmp_path):
    """The command starts the rest once each worker started first has claimed a trial (their imports
    would take a core from those first trials' start), or one of them has exited, or at the limit."""
    import subprocess
    import sys

    from search.api._start import _await_claims
    from search.coordination import Coordinator

    loc, optuna_study = _new_study(tmp_path, epoch_seconds=0.0, trials=3)
    coordinator = Coordinator(loc.storage_url, "sleep")
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as first:
        try:
            claimer = threading.Timer(0.6, lambda: coordinator.claim(optuna_study))
            started = time.monotonic()
            claimer.start()
            _await_claims(coordinator, [first], before=0, limit=30)
            assert 0.6 <= time.monotonic() - started < 20
            assert coordinator.counts().state("RUNNING") == 1
            started = time.monotonic()  # counted from `before`: one more claim needed, none comes
            _await_claims(coordinator, [first], before=1, limit=0.5)
            assert 0.5 <= time.monotonic() - started < 20
        finally:
            first.kill()
    started = time.monotonic()  # an exited worker claims nothing more
    _await_claims(coordinator, [first], before=1, limit=30)
    assert time.monotonic() - started < 5


@pytest.mark.slow
def test_once_the_study_is_over_workers_still_importing_are_ended_and_the_others_left_to_finish(tmp_path):
    """A worker started late (see start_at_once) that is still importing when the study is over
    would make the study's end wait for its imports, only to find nothing to run: it is ended. A
    worker that has joined is left alone (it may still be writing its last trial's MLflow run)."""
    from search.execution import release_workers, spawn_early
    from search.execution._early import _TEMP_LOGS, end_unjoined
    from search.tracking import open_parent_run

    loc, optuna_study = _new_study(tmp_path, epoch_seconds=0.0, trials=1)
    open_parent_run(optuna_study, loc, resumed=False, summary={"study": "sleep"})
    [joining] = spawn_early(1, [], False, None)
    release_workers([joining], "sleep", loc)
    temp = _TEMP_LOGS[joining.pid]
    deadline = time.monotonic() + 180
    while temp.exists() and joining.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not temp.exists()  # it has joined
    [importing] = spawn_early(1, [], False, None, first=1, total=2)
    release_workers([importing], "sleep", loc)
    assert end_unjoined([joining, importing]) == {1}
    assert importing.poll() is not None and not _TEMP_LOGS[importing.pid].exists()
    assert joining.wait(timeout=180) == 0, (loc.project_dir / "logs" / "worker-0.log").read_text()[-3000:]
    assert [t.state.name for t in optuna_study.get_trials()] == ["COMPLETE"]
