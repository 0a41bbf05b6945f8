"""`search start` with two objectives and a constraint, through real workers on SQLite: each trial's
values and feasibility, the Pareto front `search best` lists, and a resume that asks for others.

The training-free sleep study (``benchmarks/studies/sleep_study.py``): its loss is the squared
distance of a weight from 0.3, starting at ``x``; its final metrics are ``train_loss``, ``val_loss``
and ``val_rmse``. Two known configurations come first: one that misses ``val_rmse<=1``, one that meets it.
A second search, on SQLite and PostgreSQL, loses a worker to SIGKILL in the middle of a trial.
"""

from __future__ import annotations

import json

import pytest
from search_helpers import FAST, SLEEP_STUDY, assert_exact_budget, parent_summary, start_losing_a_worker

from search.settings import Candidate, pareto_front, select

ARGS = ["--study", str(SLEEP_STUDY), "--study-option", "epochs=2", "--study-option", "epoch_seconds=0",
        "--objective", "val_loss:min", "--objective", "train_loss:min", "--constraint", "val_rmse<=1",
        "--no-retrain", "--patience", "off"]  # fmt: skip
KNOWN = [{"x": 1.9, "lr": 0.001}, {"x": 0.35, "lr": 0.001}]  # |x - 0.3| barely moves at this rate: 1.6 and 0.05


@pytest.mark.slow
def test_two_objectives_and_a_constraint_with_two_workers(cli, warm_cli, tmp_path):
    (tmp_path / "known.json").write_text(json.dumps(KNOWN))
    proc = cli("start", *ARGS, "--trials", "6", "--workers", "2", "--enqueue", "known.json", cwd=tmp_path, check=True)
    assert ("  objectives: minimize val_loss, minimize train_loss; subject to val_rmse<=1; champion: --select first; "
            "no pruning: trials end early only by --patience on val_loss") in proc.stdout  # fmt: skip

    rows = json.loads(warm_cli("trials", "--name", "sleep", "--json", cwd=tmp_path, check=True).stdout)
    assert [r["state"] for r in rows] == ["COMPLETE"] * 6  # nothing left RUNNING, none failed
    assert len({r["worker"] for r in rows}) == 2
    for r in rows:
        best_epoch, final = r["values"][0], r["metrics"]
        assert best_epoch <= final["val_loss"] and r["values"][1] == final["train_loss"] and r["value"] == best_epoch
        assert r["feasible"] is (final["val_rmse"] <= 1)
    assert [r["feasible"] for r in rows[:2]] == [False, True]  # the known configurations ran first

    import optuna

    study = optuna.load_study(study_name="sleep", storage=f"sqlite:///{tmp_path / '.search' / 'optuna.db'}")
    assert [d.name for d in study.directions] == ["MINIMIZE", "MINIMIZE"]
    for trial in study.trials:  # Optuna's own view: what its samplers and best_trials read
        rmse = trial.user_attrs["final_metrics"]["val_rmse"]
        assert trial.constraints == pytest.approx({"val_rmse<=1": rmse - 1})
    feasible = [Candidate(r["number"], tuple(r["values"]), r["feasible"]) for r in rows]
    front = [c.number for c in pareto_front(feasible, [False, False])]
    assert sorted(t.number for t in study.best_trials) == front  # Optuna's front of feasible trials agrees
    champion = min((r for r in rows if r["feasible"]), key=lambda r: (r["values"][0], r["number"]))["number"]

    best = json.loads(warm_cli("best", "--name", "sleep", "--json", cwd=tmp_path, check=True).stdout)
    assert best["trial"] == champion and [p["trial"] for p in best["pareto_front"]] == front
    assert [p["trial"] for p in best["pareto_front"] if p["champion"]] == [champion]
    text = warm_cli("best", "--name", "sleep", cwd=tmp_path, check=True).stdout
    assert f"* trial {champion}: val_loss " in text and "trials meeting val_rmse<=1" in text
    assert f"champion trial {champion} (--select first): values" in proc.stdout

    from search.coordination import Coordinator
    from search.exceptions import SearchError
    from search.tracking import pick_trial

    coordinator = Coordinator(f"sqlite:///{tmp_path / '.search' / 'optuna.db'}", "sleep")
    assert pick_trial(coordinator, None).number == champion  # what the retrain trains and registers
    with pytest.raises(SearchError, match="^trial 0 does not meet the study's constraints"):
        pick_trial(coordinator, 0)

    again = cli("start", *ARGS[:6], "--objective", "val_loss:min", "--trials", "8", "--workers", "0", cwd=tmp_path)
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    assert "--objective val_loss:min differs from the study's stored objectives val_loss:min train_loss:min" in (
        again.stderr)  # fmt: skip


@pytest.mark.slow
def test_a_killed_worker_costs_a_multi_objective_study_nothing(study_url, warm_cli, tmp_path):
    """A worker SIGKILLed mid-trial: the dead trial is reaped and retried, every requested trial
    finishes once with both values and its feasibility, `search best` lists the Pareto front and
    its --select knee champion, and `status`, `trials`, the report and MLflow agree.
    Its epochs' values reach the database with the last epoch's checkpoint, so it dies after its
    last epoch and the retry resumes with nothing to train: its final metrics are the checkpoint's."""
    (tmp_path / "known.json").write_text(json.dumps(KNOWN))  # a feasible trial, whichever one dies
    running, watch = start_losing_a_worker(
        ["--study", str(SLEEP_STUDY), "--trials", "4", "--workers", "2", *FAST, "--objective", "val_loss:min",
         "--objective", "latency_ms:min", "--constraint", "val_rmse<=1", "--select", "knee", "--enqueue", "known.json",
         "--study-option", "epochs=4", "--study-option", "epoch_seconds=0.5"], study_url, "mo", tmp_path,
    )  # fmt: skip
    trials = watch.trials()
    assert_exact_budget(trials, 4)  # none left RUNNING, none finished twice
    assert watch.trial(running.number).state.name == "FAIL"
    [retry] = [t for t in trials if t.system_attrs.get("failed_trial") == running.number]
    assert retry.params == running.params
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 4  # requested = finished
    for trial in complete:
        final = trial.user_attrs["final_metrics"]
        assert len(trial.values) == 2 and trial.values[1] == final["latency_ms"]
        assert trial.constraints == pytest.approx({"val_rmse<=1": final["val_rmse"] - 1})
        assert trial.user_attrs["feasible"] is (final["val_rmse"] <= 1)

    best = json.loads(warm_cli("best", "--name", "mo", "--storage", study_url, "--json", cwd=tmp_path,
                               check=True).stdout)  # fmt: skip
    found = [Candidate(t.number, tuple(t.values), t.user_attrs["feasible"]) for t in complete]
    front = [c.number for c in pareto_front(found, [False, False])]
    assert front and [p["trial"] for p in best["pareto_front"]] == front
    import optuna

    optuna_front = optuna.load_study(study_name="mo", storage=watch.storage).best_trials
    assert sorted(t.number for t in optuna_front) == front  # Optuna's own front of feasible trials agrees
    assert [p["trial"] for p in best["pareto_front"] if p["champion"]] == [best["trial"]]
    assert best["trial"] == select(found, [False, False], "knee").number  # --select knee's champion
    where = ["--name", "mo", "--storage", study_url]
    status = json.loads(warm_cli("status", *where, "--json", cwd=tmp_path, check=True).stdout)
    assert (status["best_trial"], status["finished"], status["budget"]) == (best["trial"], 4, 4)
    rows = json.loads(warm_cli("trials", *where, "--json", cwd=tmp_path, check=True).stdout)
    assert [(r["number"], r["values"], r["feasible"]) for r in rows if r["state"] == "COMPLETE"] == [
        (t.number, list(t.values), t.user_attrs["feasible"]) for t in complete]  # fmt: skip
    warm_cli("report", *where, "-o", str(tmp_path / "report.html"), cwd=tmp_path, check=True)
    assert 'data-figure="pareto"' in (tmp_path / "report.html").read_text()
    summary = parent_summary(tmp_path / ".search", "mo")  # what the study's MLflow parent run keeps
    assert (summary["best_trial"], summary["pareto_front"]) == (best["trial"], front)
