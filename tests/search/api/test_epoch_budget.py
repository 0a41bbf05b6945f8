"""`search start --epoch-budget`: no new trial once the study's trials have trained that many epochs,
each epoch counted once across retries, resumptions and population-based training's copies; the
budget of trials may be left out, the same command trains nothing more, a larger one goes on."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from search.coordination import Coordinator, epochs_trained
from search.exceptions import SearchError
from search.observation import snapshot
from search.settings import parse_epoch_budget

SLEEP = str(Path(__file__).resolve().parents[3] / "benchmarks" / "studies" / "sleep_study.py")
QUICK = ("--study", SLEEP, "--workers", "1", "--no-retrain", "--pruner", "none", "--patience", "off",
         "--study-option", "epochs=2", "--study-option", "epoch_seconds=0.4")  # fmt: skip


def _attempt(number: int, steps: list[int], state: TrialState = TrialState.COMPLETE, user: dict | None = None,
             follows: list[int] | None = None) -> optuna.trial.FrozenTrial:  # fmt: skip
    trial = create_trial(state=state, value=0.5 if state == TrialState.COMPLETE else None, params={"x": 0.1},
                         distributions={"x": FloatDistribution(0, 1)}, user_attrs=user or {},
                         system_attrs={"retry_history": follows} if follows else {},
                         intermediate_values={s: 1.0 / s for s in steps})  # fmt: skip
    trial.number = number
    return trial


def test_each_epoch_is_counted_once_across_retries_resumptions_and_copies():
    trials = [
        _attempt(0, [1, 2, 3, 4]),  # ran to its end: 4
        _attempt(1, [1, 2], TrialState.FAIL),  # its worker died after 2 epochs: 2
        _attempt(2, [1, 2, 3, 4], follows=[1]),  # the retry: took over 2, trained 2 more (or again): 2
        _attempt(3, [1, 2], TrialState.FAIL, {"fail_reason": "not needed: trial 1 has a retry"}, follows=[1]),  # 0
        _attempt(4, [1, 2], TrialState.PRUNED, {"paused_at": 2}),  # paused at epoch 2: 2
        _attempt(5, [1, 2, 3], user={"resumed_from": 4}, follows=[4]),  # resumed: 1
        _attempt(6, [1, 2, 3], TrialState.PRUNED),  # replaced by a copy: 3
        # the copy of trial 0's epoch 2 (PBT) that replaced trial 6, then failed after one epoch of its own
        _attempt(7, [1, 2, 3], TrialState.FAIL, {"resumed_from": 6, "pbt_epoch": 2, "pbt_parent": 0}, follows=[6]),
        _attempt(8, [1, 2, 3, 4], user={"pbt_epoch": 2, "pbt_parent": 0}, follows=[6, 7]),  # its retry: 1
        _attempt(9, [], TrialState.WAITING),  # queued: 0
        _attempt(10, [1], TrialState.RUNNING),  # running, after one epoch: 1
    ]
    assert epochs_trained(trials) == 4 + 2 + 2 + 0 + 2 + 1 + 3 + 1 + 1 + 0 + 1
    assert epochs_trained([]) == 0


@pytest.mark.parametrize(("text", "epochs"), [("800", 800), (" 12 ", 12), ("40x", 40 * 20), ("3X", 60), (7, 7)])
def test_an_epoch_budget_reads_as_epochs_or_trials_worth(text, epochs):
    assert parse_epoch_budget(text, search_epochs=20) == epochs


@pytest.mark.parametrize("text", ["0", "-5", "0x", "x", "1.5", "1.5x", "many", "", True])
def test_a_bad_epoch_budget_is_one_line_naming_the_flag(text):
    with pytest.raises(SearchError, match=r"^--epoch-budget must be a positive whole number of epochs, or Nx"):
        parse_epoch_budget(text, search_epochs=20)


@pytest.mark.slow
def test_a_bad_epoch_budget_creates_nothing(cli, tmp_path):
    proc = cli("start", *QUICK, "--epoch-budget", "0x", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--epoch-budget must be" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_k_fold_study_refuses_an_epoch_budget(cli, tmp_path):
    proc = cli("start", "--study", "resmlp", "--study-option", "folds=3", "--epoch-budget", "100", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--epoch-budget counts epochs, and a k-fold study's trials report folds" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def _status(warm_cli, cwd):
    return json.loads(warm_cli("status", "--name", "sleep", "--json", cwd=cwd, check=True).stdout)


def _epochs(cwd: Path) -> int:
    study = optuna.load_study(study_name="sleep", storage=f"sqlite:///{cwd / '.search' / 'optuna.db'}")
    return epochs_trained(study.get_trials(deepcopy=False))


@pytest.mark.slow
def test_an_epoch_budget_ends_the_search_and_a_larger_one_goes_on(cli, tmp_path, warm_cli):
    proc = cli("start", *QUICK, "--epoch-budget", "3x", cwd=tmp_path, check=True)  # 6 epochs; no --trials
    assert "no new trial once the trials have trained 6 epochs in all (--epoch-budget)" in proc.stdout
    status, trained = _status(warm_cli, tmp_path), _epochs(tmp_path)
    ended = status["ended_early"]
    assert ended["reason"].startswith("--epoch-budget 6 epochs trained (") and ended["asked"] == 6
    assert status["running"] == status["waiting"] == 0 and status["budget"] == status["finished"] == ended["claimed"]
    # Each trial trains its 2 epochs; those claimed before the follower saw the budget reached finished.
    assert 3 <= status["finished"] <= 5 and trained == 2 * status["finished"] >= 6
    assert f"({trained} epochs trained in all; a larger --epoch-budget goes on)" in proc.stdout
    snap = snapshot(Coordinator(f"sqlite:///{tmp_path / '.search' / 'optuna.db'}", "sleep"))
    assert snap.epoch_budget is not None and snap.epoch_budget["epochs"] == 6 and snap.epoch_budget["trained"] >= 6
    assert f"sleep: {snap.finished}/{snap.budget} finished" in snap.line()  # ended: counted in trials again
    shown = f"sleep: {snap.finished} finished, {snap.epoch_budget['trained']}/6 epochs (--epoch-budget), "
    assert shown in replace(snap, ended_early=None, running=1).line()  # as the live view showed it while it ran
    assert f"sleep: {snap.finished}/{snap.budget} finished" in replace(snap, ended_early=None).line()  # done

    again = cli("start", *QUICK, "--epoch-budget", "3x", cwd=tmp_path, check=True)
    assert "is finished: nothing to run" in again.stdout and "a larger --epoch-budget searches on" in again.stdout
    assert _status(warm_cli, tmp_path)["finished"] == status["finished"] and _epochs(tmp_path) == trained

    more = cli("start", *QUICK, "--epoch-budget", "14", cwd=tmp_path, check=True)
    assert "ended early: --epoch-budget 14 epochs trained" in more.stdout
    status = _status(warm_cli, tmp_path)
    assert 7 <= status["finished"] <= 9 and _epochs(tmp_path) == 2 * status["finished"]


@pytest.mark.slow
def test_the_python_api_takes_an_epoch_budget(tmp_path):
    import search

    with pytest.raises(search.SearchError, match="--epoch-budget must be a positive whole number"):
        search.start(SLEEP, epoch_budget="soon", project_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
    outcome = search.start(SLEEP, workers=1, retrain=False, pruner="none", patience="off", epoch_budget=4,
                           study_options={"epochs": 2, "epoch_seconds": 0.3}, project_dir=tmp_path)  # fmt: skip
    ended = outcome.summary["ended_early"]
    assert ended["reason"].startswith("--epoch-budget 4 epochs trained (") and ended["asked"] == 4
    assert 2 <= outcome.summary["finished"] <= 4
