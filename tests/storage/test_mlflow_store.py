"""A new project's embedded MLflow store starts as a copy of an empty, migrated one."""

from __future__ import annotations

import sqlite3


def test_a_new_store_is_a_copy_of_the_empty_template_and_behaves_as_one_mlflow_made(tmp_path, monkeypatch):
    from search.tracking import Tracker
    from storage import resolve_tracking
    from storage._mlflow import empty_store_template

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    template = empty_store_template()
    assert not template.exists()
    first = Tracker(resolve_tracking(None, tmp_path / "one"))
    assert not template.exists()  # a tracker opens its store when its client is first used
    assert first.client is not None
    assert template.exists()  # made once, by MLflow, then emptied of its Default experiment
    with sqlite3.connect(template) as conn:
        assert conn.execute("SELECT count(*) FROM experiments").fetchone() == (0,)
    made = template.stat().st_mtime_ns

    second = Tracker(resolve_tracking(None, tmp_path / "two"))
    assert second.client is not None
    assert template.stat().st_mtime_ns == made  # copied, not made again
    for tracker, project in ((first, "one"), (second, "two")):
        # MLflow adds the Default experiment when it opens the copy, with its own artifact root
        assert tracker.client.get_experiment("0").name == "Default"
        experiment = tracker.experiment_id("s")
        assert tracker.client.get_experiment(experiment).artifact_location.endswith(f"/{project}/mlartifacts")
        run = tracker.client.create_run(experiment)
        tracker.log_metrics(run.info.run_id, {"loss": 1.0}, step=1)
        assert tracker.client.get_run(run.info.run_id).data.metrics == {"loss": 1.0}
    with sqlite3.connect(tmp_path / "two" / "mlflow.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_an_unwritable_cache_leaves_the_store_to_mlflow(tmp_path, monkeypatch):
    from search.tracking import Tracker
    from storage import resolve_tracking

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file: no cache directory can be made in it
    monkeypatch.chdir(tmp_path)
    tracker = Tracker(resolve_tracking(None, tmp_path / "p"))
    assert tracker.client.get_experiment("0").name == "Default"
    assert (tmp_path / "p" / "mlflow.db").exists()
