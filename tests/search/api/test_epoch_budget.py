"""`search start --epoch-budget`: no new trial once the study's trials have trained that many epochs,
each epoch counted once across retries, resumptions and population-based training's copies; the
budget of trials may be left out, the same command trains nothing more, a larger one goes on."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

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


def _spent_study(tmp_path: Path, epochs: list[int], shown: dict | None):
    """A study of 10 trials' budget whose trials trained ``epochs`` each, and the follower's last count
    ``shown``: ``(coordinator, optuna study)``."""
    import time

    from search.coordination import EPOCHS_ATTR
    from search.settings import SearchSettings, StudyRecord

    ranked = Path(__file__).resolve().parents[1] / "data" / "ranked_study.py"
    record = StudyRecord(study_ref=str(ranked), metric="val_loss", direction="minimize", search_epochs=4,
                         settings=SearchSettings())  # fmt: skip
    tmp_path.mkdir(exist_ok=True)
    coordinator = Coordinator(f"sqlite:///{tmp_path / 'optuna.db'}", "s")
    study, _ = coordinator.create_or_resume(record, budget=10)
    for number, n in enumerate(epochs):
        study.add_trial(_attempt(number, list(range(1, n + 1))))
    if shown is not None:
        study.set_user_attr(EPOCHS_ATTR, {"per_second": 1.0, "at": time.time(), **shown})
    return coordinator, study


def _claims(monkeypatch, tmp_path: Path, epochs: list[int], shown: dict | None) -> tuple[Any, Any, list[int]]:
    """:func:`_spent_study`, and the list of the epoch counts its claims make (one trained-epochs total each)."""
    import search.coordination._no_new_trials as stopping

    counted: list[int] = []

    def counting(trials):
        counted.append(epochs_trained(trials))
        return counted[-1]

    monkeypatch.setattr(stopping, "epochs_trained", counting)
    coordinator, study = _spent_study(tmp_path, epochs, shown)
    return coordinator, study, counted


def test_a_claim_counts_the_epochs_itself_only_near_the_budget_and_then_stops_new_trials(tmp_path, monkeypatch):
    """The follower's count may be a second old: a claim near the end counts again, one far from it
    reads only that count (with the trial counts, under the lock)."""
    from search.coordination import EPOCHS_ATTR, STOPPED_ATTR

    far, study, counted = _claims(monkeypatch, tmp_path / "far", [4, 4], {"epochs": 100, "trained": 8})
    assert far.claim(study, trial_epochs=4)[0].number == 2 and counted == []  # 8 + 1/s * 4 s + (0 + 1) * 4 < 100
    alone, study, counted = _claims(monkeypatch, tmp_path / "alone", [4, 4, 4], None)  # no --epoch-budget
    assert alone.claim(study, trial_epochs=4)[0].number == 3 and counted == []
    unasked, study, counted = _claims(monkeypatch, tmp_path / "unasked", [4, 4, 4], {"epochs": 12, "trained": 8})
    assert unasked.claim(study)[0].number == 3 and counted == []  # no trial_epochs: not kept (benchmarks)

    short, study, counted = _claims(monkeypatch, tmp_path / "short", [4, 4], {"epochs": 12, "trained": 4})
    assert short.claim(study, trial_epochs=4)[0].number == 2 and counted == [8]  # near, but 8 < 12: claimed
    assert STOPPED_ATTR not in short.study_user_attrs() and short.budget() == 10

    spent, study, counted = _claims(monkeypatch, tmp_path / "spent", [4, 4, 4], {"epochs": 12, "trained": 8})
    trial, counts = spent.claim(study, trial_epochs=4)  # the follower's count says 8: old
    assert trial is None and counted == [12] and counts.state("RUNNING") == 0
    ended = spent.study_user_attrs()[STOPPED_ATTR]
    assert ended == {"reason": "--epoch-budget 12 epochs trained (12 so far)", "asked": 10, "claimed": 3}
    assert spent.budget() == 3 and spent.study_user_attrs()[EPOCHS_ATTR]["trained"] == 12  # what status shows
    assert spent.claim(study, trial_epochs=4)[0] is None and counted == [12]  # stopped: the next claim counts nothing

    # Its 10 trials taken (a worker lingering while others run): no trial to take, nothing counted.
    full, study, counted = _claims(monkeypatch, tmp_path / "full", [4] * 10, {"epochs": 44, "trained": 36})
    assert full.claim(study, trial_epochs=4)[0] is None and counted == []
    assert STOPPED_ATTR not in full.study_user_attrs()

    # The follower found it spent and has not yet stopped new trials: the claim does, without counting.
    seen, study, counted = _claims(monkeypatch, tmp_path / "seen", [4, 4, 4], {"epochs": 12, "trained": 12})
    assert seen.claim(study, trial_epochs=4)[0] is None and counted == [] and seen.budget() == 3
    # A start with no rate yet (nothing trained when the follower first counted): counted.
    early, study, counted = _claims(monkeypatch, tmp_path / "early", [4, 4, 4], {"epochs": 12, "trained": 0,
                                                                                 "per_second": None})  # fmt: skip
    assert early.claim(study, trial_epochs=4)[0] is None and counted == [12]


def test_a_retry_is_claimed_near_a_spent_epoch_budget(tmp_path, monkeypatch):
    """A queued retry continues a trial the budget already counts: it is taken without counting."""
    coordinator, study, counted = _claims(monkeypatch, tmp_path, [4, 4, 4], {"epochs": 12, "trained": 12})
    retry = create_trial(state=TrialState.WAITING, system_attrs={"failed_trial": 2})
    study.add_trial(retry)
    trial, _ = coordinator.claim(study, trial_epochs=4)
    assert trial is not None and trial.number == 3 and counted == [] and coordinator.budget() == 10


def test_the_first_stop_is_the_one_recorded(tmp_path):
    """The follower stopping after a worker did (or a --timeout after an --epoch-budget) keeps the first record."""
    from search.coordination import STOPPED_ATTR, stop_new_trials

    coordinator, _ = _spent_study(tmp_path, [4, 4], None)
    first = stop_new_trials(coordinator, "--epoch-budget 8 epochs trained (8 so far)")
    assert stop_new_trials(coordinator, "--timeout 5 s passed") == first == {
        "reason": "--epoch-budget 8 epochs trained (8 so far)", "asked": 10, "claimed": 2}  # fmt: skip
    assert coordinator.study_user_attrs()[STOPPED_ATTR] == first and coordinator.budget() == 2


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
    # Each trial trains its 2 epochs; the worker that finished the third counted them before claiming again.
    assert status["finished"] == 3 and trained == 6
    assert f"({trained} epochs trained in all; a larger --epoch-budget goes on)" in proc.stdout
    snap = snapshot(Coordinator(f"sqlite:///{tmp_path / '.search' / 'optuna.db'}", "sleep"))
    assert snap.epoch_budget is not None and snap.epoch_budget["epochs"] == 6 and snap.epoch_budget["trained"] >= 6
    assert f"sleep: {snap.finished}/{snap.budget} finished" in snap.line()  # ended: counted in trials again
    shown = f"sleep: {snap.finished} finished, {snap.epoch_budget['trained']}/6 epochs (--epoch-budget), "
    assert shown in replace(snap, ended_early=None, running=1).line()  # as the live view showed it while it ran
    assert f"sleep: {snap.finished}/{snap.budget} finished" in replace(snap, ended_early=None).line()  # done

    plain = cli("start", *QUICK, cwd=tmp_path, check=True)  # no limit, no --trials: the stored budget, not the
    # stand-in one (a trial per epoch) the stopped run asked for: no grid points were left queued
    assert "is finished: nothing to run" in plain.stdout and _epochs(tmp_path) == trained

    again = cli("start", *QUICK, "--epoch-budget", "3x", cwd=tmp_path, check=True)
    assert "is finished: nothing to run" in again.stdout and "a larger --epoch-budget searches on" in again.stdout
    assert _status(warm_cli, tmp_path)["finished"] == status["finished"] and _epochs(tmp_path) == trained

    more = cli("start", *QUICK, "--epoch-budget", "14", cwd=tmp_path, check=True)
    assert "ended early: --epoch-budget 14 epochs trained" in more.stdout
    status = _status(warm_cli, tmp_path)
    assert status["finished"] == 7 and _epochs(tmp_path) == 14


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
