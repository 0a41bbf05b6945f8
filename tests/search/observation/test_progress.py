"""What people watching a search see: the snapshot, `search status`, and the live view of `search start`."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import storage
from search.coordination import Coordinator
from search.observation import PlainFollower, Snapshot, duration, make_follower, snapshot, trials_per_minute

FAKE_PASSWORD = "hunter2-secret"
RUNNING = {"worker": "nodeB:22:0", "host": "nodeB", "epoch": 3}


def _with_password(url: str) -> str:
    """PostgreSQL in the test set-up trusts local users, so any password works and must stay hidden."""
    return url.replace("root@", f"root:{FAKE_PASSWORD}@") if storage.is_postgres(url) else url


def test_snapshot_counts_best_and_running_trial(demo_study):
    snap = snapshot(Coordinator(demo_study.url, demo_study.name))
    assert (snap.budget, snap.finished, snap.complete, snap.pruned, snap.failed) == (8, 6, 3, 2, 1)
    assert (snap.running, snap.waiting, snap.retried) == (1, 0, 0)
    assert (snap.best_value, snap.best_trial) == (0.4, 2)
    assert (snap.metric, snap.direction, snap.search_epochs) == ("val_loss", "minimize", 4)
    [trial] = snap.running_trials
    assert (trial.number, trial.worker, trial.host, trial.epoch) == (6, RUNNING["worker"], "nodeB", 3)
    assert snap.trials_per_minute > 0 and snap.eta_seconds is not None and snap.eta_seconds > 0


def test_status_from_another_directory_text_and_json(demo_study, warm_cli, tmp_path):
    """Any machine: only flags (or SEARCH_* variables) say where the study is, nothing in the cwd."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    flags = ["--name", demo_study.name, "--storage", _with_password(demo_study.url)]
    if storage.is_sqlite(demo_study.url):  # a shared file: its directory is the project directory
        flags += ["--project-dir", str(demo_study.project_dir)]
    text = warm_cli("status", *flags, cwd=elsewhere, check=True).stdout
    raw = warm_cli("status", *flags, "--json", cwd=elsewhere, check=True).stdout
    data = json.loads(raw)
    assert {k: data[k] for k in ("study", "budget", "finished", "complete", "pruned", "failed", "running")} == {
        "study": "demo", "budget": 8, "finished": 6, "complete": 3, "pruned": 2, "failed": 1, "running": 1,
    }  # fmt: skip
    assert (data["best_value"], data["best_trial"]) == (0.4, 2)
    assert data["running_trials"][0] | {"seconds": 0} == {**RUNNING, "number": 6, "seconds": 0}
    summary, running_line = text.splitlines()
    assert summary.startswith("demo: 6/8 finished, 1 running, 3 complete, 2 pruned, 1 failed, best 0.4 (trial 2)")
    assert running_line.startswith("  trial 6 on nodeB (nodeB:22:0), epoch 3/4, running ")
    assert FAKE_PASSWORD not in text + raw


def test_status_of_a_missing_study_is_one_line(demo_study, warm_cli, tmp_path):
    proc = warm_cli("status", "--name", "nope", "--storage", _with_password(demo_study.url),
                    "--project-dir", str(demo_study.project_dir), cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2 and "study 'nope' does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr and FAKE_PASSWORD not in proc.stderr


def _trial_at(start: datetime, seconds: float, done: bool = True):  # noqa: ANN202 - a FrozenTrial
    from optuna.trial import TrialState, create_trial

    trial = create_trial(state=TrialState.COMPLETE, value=1.0)
    trial.datetime_start = start
    trial.datetime_complete = start + timedelta(seconds=seconds) if done else None
    return trial


def test_trial_rate_of_a_finished_search_is_its_rate_while_it_ran():
    start = datetime.now() - timedelta(days=1)
    trials = [_trial_at(start + timedelta(seconds=60 * i), 60) for i in range(10)]  # 10 trials in 10 minutes
    assert trials_per_minute(trials, since=None, active=False) == pytest.approx(1.0)
    assert trials_per_minute(trials, since=None, active=True) < 0.01  # still running a day later: slow
    assert trials_per_minute([], since=None, active=True) == 0.0


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (42.4, "42s"), (185, "3m05s"), (7620, "2h07m")])
def test_durations_read_at_a_glance(seconds, text):
    assert duration(seconds) == text


def test_live_view_shows_what_status_shows(sqlite_demo):
    from rich.console import Console

    from search.observation._live import render

    snap = snapshot(Coordinator(sqlite_demo.url, sqlite_demo.name))
    console = Console(width=110, record=True, file=io.StringIO())
    console.print(render(snap, elapsed=125))
    text = console.export_text()
    for fragment in ("demo · minimize val_loss", "6/8 finished", "complete 3", "pruned 2", "failed 1",
                     "running 1", "best 0.4 (trial 2)", "trials/min", "ETA ", "elapsed 2m05s",
                     "nodeB:22:0", "3/4"):  # fmt: skip
        assert fragment in text, (fragment, text)


def test_follower_choice(sqlite_demo, monkeypatch, capsys):
    from search.observation import _follow
    from search.observation._live import LiveFollower

    coordinator = Coordinator(sqlite_demo.url, sqlite_demo.name)
    monkeypatch.setattr(_follow, "_is_terminal", lambda: True)
    assert isinstance(make_follower(coordinator, quiet=False), LiveFollower)
    quiet = make_follower(coordinator, quiet=True)
    quiet()
    quiet.close()
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(_follow, "_is_terminal", lambda: False)
    plain = make_follower(coordinator, quiet=False)
    assert isinstance(plain, PlainFollower)
    plain()
    plain()  # nothing changed: no second line
    assert capsys.readouterr().out.splitlines() == [snapshot(coordinator, plain.started).line()]


def test_snapshot_json_round_trips(sqlite_demo):
    snap = snapshot(Coordinator(sqlite_demo.url, sqlite_demo.name))
    data = json.loads(snap.to_json())
    assert set(data) == set(Snapshot.__dataclass_fields__)
    assert data["running_trials"][0]["worker"] == RUNNING["worker"]


# -- on a study whose budget is already spent: `search follow` draws once, `search start` sums up --


def _start_args(demo, quiet: bool = False) -> list[str]:
    return ["start", "--study", "resmlp", "--trials", "6", "--workers", "0", "--no-retrain",
            "--study-option", "search_epochs=4", *demo.flags(), *(["--quiet"] if quiet else [])]  # fmt: skip


def _run_in_terminal(args: list[str], cwd: Path) -> str:
    """Run ``python -m search ARGS`` with a pseudo-terminal as stdout, as in an interactive shell."""
    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    env.update(TERM="xterm-256color", COLUMNS="110", LINES="40", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "search", *args], cwd=cwd, env=env,
                            stdin=secondary, stdout=secondary, stderr=secondary)  # fmt: skip
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    assert proc.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


@pytest.fixture
def spent_study(make_demo, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    demo = make_demo(storage.sqlite_url(project / "optuna.db"), project, running=False)
    Coordinator(demo.url, demo.name).load().set_user_attr("hpsearch.budget", 6)  # its 6 trials are the budget
    return demo


def test_follow_on_a_terminal_draws_the_live_view(spent_study, tmp_path):
    """The view `search start` draws while its trials run (`search start` on a finished study runs nothing)."""
    raw = _run_in_terminal(["follow", *spent_study.flags()], tmp_path)
    assert "\x1b[" in raw  # drawn with terminal control codes, not plain lines
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert "demo · minimize val_loss" in out and "6/6 finished" in out and "best 0.4 (trial 2)" in out
    assert out.index("6/6 finished") < out.index("study 'demo' finished: 6/6 trials")
    view = out[: out.index("study 'demo' finished: 6/6 trials")]
    for fragment in ("best params lr=0.001  width=192", "trial 3 failed: diverged at epoch 1",
                     "dashboard: search dashboard --name demo"):  # fmt: skip
        assert fragment in view, (fragment, view)


def test_where_to_look_names_the_commands_or_the_mlflow_server(tmp_path, monkeypatch):
    from search.api._output import watch_hints
    from search.settings import Locations

    monkeypatch.chdir(tmp_path)
    for name in ("SEARCH_PROJECT_DIR", "SEARCH_STORAGE", "SEARCH_TRACKING_URI", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / ".search"
    project.mkdir()
    coordinator = Coordinator(storage.sqlite_url(project / "optuna.db"), "demo")
    embedded = storage.resolve_tracking(None, project).tracking_uri
    loc = Locations(project, coordinator.url, embedded, None, project / "checkpoints", embedded=True)
    assert watch_hints(coordinator, loc) == ("dashboard: search dashboard --name demo",
                                             "MLflow UI: search mlflow --name demo")  # fmt: skip
    server = Locations(project, coordinator.url, f"http://bob:{FAKE_PASSWORD}@mlflow:5000/", None, project,
                       embedded=True)  # fmt: skip
    dashboard, mlflow = watch_hints(coordinator, server)
    # A command to paste: the password left out (a *** would be sent as the password), not masked.
    assert dashboard == "dashboard: search dashboard --name demo --tracking-uri http://bob@mlflow:5000/"
    assert mlflow == "MLflow: http://bob:***@mlflow:5000"


def test_start_quiet_prints_only_the_summary(spent_study, search_main, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = search_main(_start_args(spent_study, quiet=True))
    assert code == 0, err
    assert out.lstrip().startswith("study 'demo': 6/6 trials finished"), out


def test_plain_follower_prints_one_line_per_finished_trial_and_nothing_per_idle_poll(sqlite_demo, capsys):
    from optuna.trial import TrialState

    coordinator = Coordinator(sqlite_demo.url, sqlite_demo.name)
    plain = PlainFollower(coordinator)
    plain()  # the trials finished before it started are summed up, not listed
    assert capsys.readouterr().out.splitlines() == [snapshot(coordinator, plain.started).line()]
    plain()
    assert capsys.readouterr().out == ""
    study_id = coordinator.storage.get_study_id_from_name(sqlite_demo.name)
    running = next(t for t in coordinator.storage.get_all_trials(study_id) if t.state == TrialState.RUNNING)
    coordinator.storage.set_trial_state_values(running._trial_id, TrialState.COMPLETE, [0.35])
    plain()
    plain()
    first, progress = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"trial 6 COMPLETE 0\.35 after 3 epochs in \S+ on nodeB:22:0", first), first
    assert progress.startswith("demo: 7/8 finished, 0 running, 4 complete, 2 pruned, 1 failed, best 0.35 (trial 6)")


def test_followers_read_a_finished_trial_once_not_at_every_poll(sqlite_demo, capsys):
    """Each poll reads the trials that were unfinished at the last (and new ones); finished ones stay as read."""
    from rich.console import Console

    from search.observation._live import LiveFollower

    coordinator = Coordinator(sqlite_demo.url, sqlite_demo.name)
    live = LiveFollower(coordinator, console=Console(file=io.StringIO()))
    for _ in range(4):
        live()
    live.close()
    assert live.seen.fetched == 7 + 3  # 6 finished and 1 running, then the running one at each poll
    assert live.last is not None and (live.last.finished, live.last.running) == (6, 1)
    plain = PlainFollower(coordinator)
    for _ in range(4):
        plain()
    assert plain.trials is not None
    assert plain.trials.fetched == 7 + 1 + 3  # its first poll also reads the snapshot's line


def test_finished_lines_say_how_each_trial_ended():
    from search.observation._follow import finished_line
    from search.observation._trials import TrialRow

    def row(state, **kw):
        base = {"number": 4, "state": state, "value": None, "params": {}, "epochs": 2, "duration_seconds": 75.0,
                "worker": "gpu1:9:0", "host": "gpu1", "retry_of": None, "logical": 4, "fail_reason": None,
                "mlflow_run_id": None}  # fmt: skip
        return TrialRow(**{**base, **kw})

    assert finished_line(row("PRUNED")) == "trial 4 PRUNED at epoch 2 in 1m15s on gpu1:9:0"
    assert finished_line(row("COMPLETE", value=0.123456, worker=None, duration_seconds=None)) == \
        "trial 4 COMPLETE 0.12346 after 2 epochs"  # fmt: skip
    assert finished_line(row("FAIL", fail_reason="CUDA out of memory\ntraceback...")) == \
        "trial 4 FAIL after 2 epochs in 1m15s on gpu1:9:0: CUDA out of memory"  # fmt: skip


def test_live_view_shows_best_params_recent_failures_and_where_to_look(sqlite_demo):
    from rich.console import Console

    from search.observation._live import render

    snap = snapshot(Coordinator(sqlite_demo.url, sqlite_demo.name))
    assert snap.best_params == {"lr": 0.001, "width": 192} and snap.recent_failures == [(3, "diverged at epoch 1")]
    console = Console(width=140, record=True, file=io.StringIO())
    console.print(render(snap, elapsed=5, hints=("dashboard: search dashboard --name demo", "MLflow UI: x")))
    text = console.export_text()
    for fragment in ("best params lr=0.001  width=192", "trial 3 failed: diverged at epoch 1",
                     "dashboard: search dashboard --name demo"):  # fmt: skip
        assert fragment in text, (fragment, text)
