"""The ``champion`` alias moves to a new model version only when its test metric beats the champion's."""

from __future__ import annotations

import math

import pytest


@pytest.fixture
def registry(tmp_path):
    """A real embedded MLflow store (SQLite tracking and registry), as `search start` makes one."""
    from search.tracking import Tracker
    from storage import resolve_tracking

    tracker = Tracker(resolve_tracking(None, tmp_path))
    tracker.client.create_registered_model("demo")
    experiment = tracker.client.create_experiment("demo")

    def version(test_loss: float | None) -> str:
        run = tracker.client.create_run(experiment)
        if test_loss is not None:
            tracker.client.log_metric(run.info.run_id, "test_loss", test_loss)
        made = tracker.client.create_model_version("demo", f"runs:/{run.info.run_id}/model", run.info.run_id)
        return str(made.version)

    return tracker, version


def _move(tracker, version: str, test_loss: float | None, direction: str = "minimize"):
    from search.tracking._retrain import _move_champion

    metrics = {} if test_loss is None else {"test_loss": test_loss}
    return _move_champion(tracker, "demo", version, "test_loss", metrics, direction)


def _champion(tracker) -> str:
    return str(tracker.client.get_model_version_by_alias("demo", "champion").version)


def test_first_version_becomes_champion(registry):
    tracker, version = registry
    assert _move(tracker, version(0.5), 0.5) == (True, "1", [])
    assert _champion(tracker) == "1"


def test_a_worse_version_leaves_the_champion_and_says_so(registry):
    tracker, version = registry
    _move(tracker, version(0.3), 0.3)
    became, champion, notes = _move(tracker, version(0.4), 0.4)
    assert (became, champion) == (False, "1") and _champion(tracker) == "1"
    assert notes == ["champion stays at version 1: its test_loss 0.3000 is not beaten by version 2's 0.4000"]


def test_a_better_version_takes_the_alias(registry):
    tracker, version = registry
    _move(tracker, version(0.3), 0.3)
    assert _move(tracker, version(0.2), 0.2)[:2] == (True, "2")
    assert _champion(tracker) == "2"


def test_maximize_compares_the_other_way(registry):
    tracker, version = registry
    _move(tracker, version(0.9), 0.9, "maximize")
    assert _move(tracker, version(0.8), 0.8, "maximize")[:2] == (False, "1")
    assert _move(tracker, version(0.95), 0.95, "maximize")[:2] == (True, "3")


@pytest.mark.parametrize("missing", [None, math.nan])
def test_a_version_without_the_metric_never_displaces_the_champion(registry, missing):
    tracker, version = registry
    _move(tracker, version(0.3), 0.3)
    became, champion, notes = _move(tracker, version(None), missing)
    assert (became, champion) == (False, "1") and _champion(tracker) == "1"
    assert "has no test_loss to compare" in notes[0]


def test_a_version_missing_a_deployment_constraint_at_full_scale_is_never_the_champion(registry):
    from search.settings._objectives import parse_constraint
    from search.tracking._deployment import missed_at_full_scale
    from search.tracking._retrain import RetrainResult, _champion_stays

    limits = [parse_constraint("latency_ms<=0.12"), parse_constraint("params<=2e5"), parse_constraint("val_rmse<=1")]
    assert missed_at_full_scale(limits, {"latency_ms": 0.1, "params": 2e5}) == []  # met; val_* is the search's
    missed = missed_at_full_scale(limits, {"latency_ms": 0.21, "params": 3e5, "val_rmse": 9.0})
    assert missed == ["latency_ms 0.21 misses latency_ms<=0.12", "params 300000 misses params<=200000"]
    tracker, version = registry
    first = version(0.5)
    assert _champion_stays(tracker, "demo", first, missed[0]) == (
        False, "", ["no champion: version 1 at full scale: latency_ms 0.21 misses latency_ms<=0.12"])  # fmt: skip
    with pytest.raises(Exception, match="alias"):  # the alias was not set
        _champion(tracker)
    _move(tracker, version(0.3), 0.3)
    became, champion, notes = _champion_stays(tracker, "demo", version(0.1), missed[1])
    assert (became, champion) == (False, "2") and _champion(tracker) == "2"
    assert notes == ["champion stays at version 2: version 3 at full scale: params 300000 misses params<=200000"]
    result = RetrainResult("demo", 0, {}, {}, {}, "demo", "1", "", False, "run")
    assert result.model_uri == "models:/demo/1"  # no champion to name: the version itself
