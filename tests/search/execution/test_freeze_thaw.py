"""Freeze-thaw through ``search start``: trials pause at rungs, resume from their checkpoints, and the
budget stays exact (SQLite and PostgreSQL, two real workers)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from search_helpers import mlflow_runs

RANKED_STUDY = Path(__file__).resolve().parents[1] / "data" / "ranked_study.py"
pytestmark = pytest.mark.slow


def _check_freeze_thaw(workdir: Path, storage: str, proc, warm_cli, env) -> None:
    import optuna

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "paused, never resumed" in proc.stdout  # the summary tells paused trials from pruned ones
    trials = optuna.load_study(study_name="ranked", storage=storage).get_trials(deepcopy=False)
    by_logical: dict[int, list] = defaultdict(list)
    for t in trials:
        by_logical[int(t.system_attrs.get("failed_trial", t.number))].append(t)
    assert len(by_logical) == 8  # the budget counts logical trials: a resumption is not a new one
    assert not [t.number for t in trials if t.state.name in ("RUNNING", "WAITING", "FAIL")]
    resumptions = [t for t in trials if "resumed_from" in t.user_attrs]
    assert resumptions, "no paused trial was resumed"
    continued = {t.user_attrs["resumed_from"] for t in resumptions}
    for t in trials:
        if t.state.name == "PRUNED":
            assert t.user_attrs["paused_at"] in (1, 2)  # every "prune" is a pause at a rung
    for number, attempts in by_logical.items():
        final = [t for t in attempts if t.number not in continued]
        assert len(final) == 1, f"trial {number} ended {len(final)} times"
    paused_by_number = {t.number: t for t in trials}
    for t in resumptions:
        paused = paused_by_number[t.user_attrs["resumed_from"]]
        # From the checkpoint kept at the pause: the model's epoch counter went on (a trial started
        # over would report x + 1 at the epoch after the pause again), and no epoch was trained twice.
        assert t.user_attrs["resumed_from_epoch"] == paused.user_attrs["paused_at"]
        x = t.params["x"]
        for epoch, value in t.intermediate_values.items():
            assert value == pytest.approx(x + 1 / epoch, abs=1e-4), (t.number, epoch)
        assert t.system_attrs["failed_trial"] == int(paused.system_attrs.get("failed_trial", paused.number))
    # MLflow: a paused trial's run ended FINISHED as PAUSED; its resumption's run names it.
    runs = mlflow_runs(workdir / ".search")
    for t in resumptions:
        paused_run = runs[paused_by_number[t.user_attrs["resumed_from"]].user_attrs["mlflow_run_id"]]
        assert paused_run.info.status == "FINISHED" and paused_run.data.tags["hpsearch.state"] == "PAUSED"
        resumed_run = runs[t.user_attrs["mlflow_run_id"]]
        assert resumed_run.data.tags["hpsearch.resumed_from"] == paused_run.info.run_id
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert complete and all(len(t.intermediate_values) == 4 for t in complete)
    checkpoints = workdir / ".search" / "checkpoints" / "ranked"
    assert not list(checkpoints.glob("trial-*")), "checkpoints of finished or abandoned paused trials were kept"
    listing = warm_cli("trials", "--name", "ranked", cwd=workdir, env=env, check=True).stdout
    assert "PAUSED" in listing and "resumed as trial" in listing
    rows = json.loads(warm_cli("trials", "--name", "ranked", "--json", cwd=workdir, env=env, check=True).stdout)
    assert sum("paused_at" in r["extra"] for r in rows) == sum(t.state.name == "PRUNED" for t in trials)


def _start(cli, workdir: Path, env: dict[str, str]):
    return cli("start", "--study", str(RANKED_STUDY), "--trials", "8", "--workers", "2", "--pruner",
               "asha:min=1,factor=2", "--no-retrain", cwd=workdir, env=env, timeout=300)  # fmt: skip


def test_trials_pause_and_resume_from_their_checkpoints_on_sqlite(cli, warm_cli, tmp_path):
    proc = _start(cli, tmp_path, {})
    _check_freeze_thaw(tmp_path, f"sqlite:///{tmp_path}/.search/optuna.db", proc, warm_cli, {})


@pytest.mark.postgres
def test_trials_pause_and_resume_from_their_checkpoints_on_postgres(cli, warm_cli, tmp_path, pg_url):
    env = {"SEARCH_STORAGE": pg_url}
    proc = _start(cli, tmp_path, env)
    _check_freeze_thaw(tmp_path, pg_url, proc, warm_cli, env)


def test_a_search_ended_early_resumes_no_paused_trial(cli, warm_cli, tmp_path):
    """--epoch-budget (as --timeout, --stop-at) ends the search with two trials paused, one of which has
    earned its resumption: none resumes after the stop; they end as at the end of a study (their
    checkpoints removed), and the same command without the limit goes on with new trials."""
    import optuna

    from search.coordination import epochs_trained

    def start(*extra: str):
        return cli("start", "--study", str(RANKED_STUDY), "--trials", "8", "--workers", "1", "--pruner",
                   "asha:min=1,factor=2", "--no-retrain", *extra, cwd=tmp_path, timeout=300)  # fmt: skip

    storage = f"sqlite:///{tmp_path}/.search/optuna.db"
    first = start("--epoch-budget", "2")
    assert first.returncode == 0 and "ended early: --epoch-budget 2 epochs trained" in first.stdout, first.stderr
    assert "2 pruned (2 paused, never resumed)" in first.stdout
    trials = optuna.load_study(study_name="ranked", storage=storage).get_trials(deepcopy=False)
    assert epochs_trained(trials) == 2 and len(trials) == 2  # the one worker counted before it claimed again
    assert all(t.state.name == "PRUNED" and t.user_attrs["paused_at"] == 1 for t in trials)
    folders = tmp_path / ".search" / "checkpoints" / "ranked"
    assert not list(folders.glob("trial-*"))

    again = start()
    assert again.returncode == 0, again.stdout + again.stderr
    trials = optuna.load_study(study_name="ranked", storage=storage).get_trials(deepcopy=False)
    assert not [t for t in trials if t.user_attrs.get("resumed_from") in (0, 1)]  # ended with the first run
    assert len({int(t.system_attrs.get("failed_trial", t.number)) for t in trials}) == 8


def test_a_budget_too_small_to_fill_the_rungs_still_completes_its_best_trial(cli, tmp_path):
    """3 trials at factor 3: rung 3 never holds 3 trials, so under the plain rule the trial that
    reaches it pauses there for good and the study ends with no complete trial (no champion, `search
    best` fails). Once the budget's trials have all started the best of each rung goes on: the best
    trial reaches its last epoch, resumed from its checkpoint at rung 1 and going on past rung 3 without
    a pause (paused there it would be the one resumed at once); the two others end paused."""
    import optuna

    proc = cli("start", "--study", str(RANKED_STUDY), "--trials", "3", "--workers", "1", "--pruner",
               "asha:min=1,factor=3", "--no-retrain", cwd=tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 complete, 2 pruned (2 paused, never resumed)" in proc.stdout, proc.stdout
    trials = optuna.load_study(study_name="ranked", storage=f"sqlite:///{tmp_path}/.search/optuna.db").trials
    (complete,) = [t for t in trials if t.state.name == "COMPLETE"]
    assert complete.params["x"] == min(t.params["x"] for t in trials)
    assert sorted(complete.intermediate_values) == [1, 2, 3, 4]
    # Resumed at rung 1 (unless it came last, when it went on at once); at rung 3, the best there once the
    # budget has started, it went on rather than pause and be resumed at once.
    assert complete.user_attrs["resumed_from_epoch"] in (0, 1)
    assert not [t.number for t in trials if t.user_attrs.get("paused_at") == 3]
    assert not list((tmp_path / ".search" / "checkpoints" / "ranked").glob("trial-*"))
