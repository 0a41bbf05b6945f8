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
