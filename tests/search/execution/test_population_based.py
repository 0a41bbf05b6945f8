"""Population-based training through ``search start``: a trial in the bottom quantile at a check epoch
goes on as a copy of a top trial's checkpoint with its mutable parameters perturbed; the budget
stays exact and the lineage is recorded (SQLite, two real workers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from search_helpers import mlflow_runs

RANKED_STUDY = Path(__file__).resolve().parents[1] / "data" / "ranked_study.py"


@pytest.mark.slow
def test_bottom_trials_go_on_as_perturbed_copies_of_top_ones(cli, warm_cli, tmp_path):
    import optuna

    from search.settings._freeze_thaw import trained_at

    proc = cli("start", "--study", str(RANKED_STUDY), "--trials", "12", "--workers", "2", "--pruner",
               "pbt:interval=1,min_trials=3,quantile=0.5", "--no-retrain", cwd=tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = optuna.load_study(study_name="ranked", storage=f"sqlite:///{tmp_path}/.search/optuna.db").get_trials()
    logical = {int(t.system_attrs.get("failed_trial", t.number)) for t in trials}
    assert len(logical) == 12  # a replaced trial's copy continues its logical trial
    assert not [t.number for t in trials if t.state.name in ("RUNNING", "WAITING", "FAIL")]
    replaced = [t for t in trials if "exploited_at" in t.user_attrs]
    assert replaced, "no trial was replaced"
    assert all(t.state.name == "PRUNED" for t in replaced)
    copies = {t.user_attrs["resumed_from"]: t for t in trials if "pbt_parent" in t.user_attrs}
    runs = mlflow_runs(tmp_path / ".search")
    for t in replaced:
        copy = copies[t.number]  # exactly one continuation each (a dict would hide a second: count below)
        epoch = copy.user_attrs["pbt_epoch"]
        parent = trained_at(trials, copy.user_attrs["pbt_parent"], epoch)  # the parent's attempt then
        assert epoch == t.user_attrs["exploited_at"]  # the parent's checkpoint of the same epoch
        assert copy.params["x"] == parent.params["x"]  # not mutable: the parent's
        old, new = copy.user_attrs["pbt_changes"].get("lr", [parent.params["lr"], parent.params["lr"]])
        assert old == parent.params["lr"] and copy.params["lr"] == new
        # The copied model's epoch counter went on: after the copied epoch its loss is the parent's
        # curve, x + 1/e; a copy started over would report x + 1 at its first epoch.
        for step, value in copy.intermediate_values.items():
            assert value == pytest.approx(copy.params["x"] + 1 / step, abs=1e-4), (copy.number, step)
        last = 4 if copy.state.name == "COMPLETE" else copy.user_attrs["exploited_at"]  # or replaced again
        assert sorted(copy.intermediate_values) == list(range(1, last + 1))
        if copy.state.name == "COMPLETE" and new != old:  # the trainer applied the new rate on resume
            last_change = copy.user_attrs["mutations"][-1]  # the lineage's earlier ones come with the copy
            assert (last_change["epoch"], last_change["field"]) == (epoch, "lr")
            assert last_change["old"] == pytest.approx(old) and last_change["new"] == pytest.approx(new)
        run = runs[copy.user_attrs["mlflow_run_id"]]
        assert run.data.tags["hpsearch.pbt_parent"] == str(copy.user_attrs["pbt_parent"])
    assert sum("pbt_parent" in t.user_attrs for t in trials) == len(replaced)
    assert not list((tmp_path / ".search" / "checkpoints" / "ranked").glob("trial-*"))
    listing = warm_cli("trials", "--name", "ranked", cwd=tmp_path, check=True).stdout
    assert "REPLACED" in listing
    warm_cli("report", "--name", "ranked", "--no-mlflow", "--output", "report.html", cwd=tmp_path, check=True)
    page = (tmp_path / "report.html").read_text()
    assert f"Population-based training: {len(replaced)} copies." in page

    # The retrain of a trial PBT made replays its lineage's params (4 full epochs: no scaling), each
    # segment resuming the last one's checkpoint: the model's epoch counter goes on (x + 1/e).
    from search.settings._freeze_thaw import lineage

    made = max((t for t in trials if t.state.name == "COMPLETE" and "pbt_epoch" in t.user_attrs),
               key=lambda t: len(lineage(trials, t)), default=None)  # fmt: skip
    if made is None:
        pytest.skip("no complete trial with a lineage this time")  # never seen: copies of top trials complete
    schedule = lineage(trials, made)
    cli("retrain", "--name", "ranked", "--trial", str(made.number), cwd=tmp_path, check=True, timeout=300)
    retrain = next(r for r in mlflow_runs(tmp_path / ".search").values()
                   if r.data.tags.get("hpsearch.source_trial") == str(made.number))  # fmt: skip
    assert json.loads(retrain.data.tags["hpsearch.pbt_schedule"]) == [[e, p] for e, p in schedule]
    from mlflow import MlflowClient

    curve = MlflowClient(f"sqlite:///{tmp_path}/.search/mlflow.db").get_metric_history(retrain.info.run_id, "val_loss")
    assert sorted(m.step for m in curve) == [1, 2, 3, 4]
    for m in curve:
        assert m.value == pytest.approx(made.params["x"] + 1 / m.step, abs=1e-4)


def test_a_study_without_mutable_parameters_is_refused_in_one_line(cli, tmp_path):
    plateau = RANKED_STUDY.parent / "plateau_study.py"
    proc = cli("start", "--study", str(plateau), "--trials", "4", "--pruner", "pbt", "--workers", "0", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: bad pruner 'pbt': it perturbs a study's mutable parameters, and study 'plateau' declares none in "
        "its search space (`mutable_params`, e.g. {'lr': 'lr'}: docs/freeze-thaw.md)"
    ]
    assert not (tmp_path / ".search").exists()
