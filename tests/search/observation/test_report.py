"""`search report`: one self-contained page whose figures say what happened in the search."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import storage
from search.coordination import Coordinator
from search.observation._report import REPORT_ARTIFACT, build_sections, render_page
from search.observation._savings import EpochSavings, epoch_savings

FAKE_PASSWORD = "hunter2-secret"
SECTIONS = ["history", "curves", "parallel", "importance", "slices", "savings", "timeline"]


def _sections(demo) -> dict:
    return {s.key: s for s in build_sections(Coordinator(demo.url, demo.name))}


def test_page_is_self_contained_and_kept_on_the_parent_run(study_url, make_demo, tmp_path, search_main):
    demo = make_demo(study_url, tmp_path / "project", tracking=True)
    out = tmp_path / "out" / "report.html"
    url = study_url.replace("root@", f"root:{FAKE_PASSWORD}@")
    code, stdout, stderr = search_main(["report", "--name", "demo", "--storage", url,
                                        "--project-dir", str(demo.project_dir), "-o", str(out)])  # fmt: skip
    assert code == 0, stderr
    page = out.read_text()
    assert re.findall(r'data-figure="(\w+)"', page) == SECTIONS
    assert page.count("plotly.js v") == 1  # the library inlined once, for every figure
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=", page)  # nothing fetched from a CDN
    assert FAKE_PASSWORD not in page + stdout + stderr
    assert "best</th><td>0.4 (trial 2)" in page

    from mlflow import MlflowClient

    client = MlflowClient(storage.resolve_tracking(None, demo.project_dir).tracking_uri)
    [parent] = client.search_runs([client.get_experiment_by_name("demo").experiment_id])
    assert parent.info.run_id in stdout
    artifact = Path(urlparse(parent.info.artifact_uri).path) / REPORT_ARTIFACT
    assert artifact.read_text() == page


def _add_trial(demo, state: str, curve: list[float], **attrs) -> None:
    import optuna

    study = optuna.load_study(study_name=demo.name, storage=demo.url)
    value = min(curve) if state == "COMPLETE" else None
    study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState[state], value=value, params={"lr": 0.01}, user_attrs=attrs,
        distributions={"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)},
        intermediate_values=dict(enumerate(curve, start=1)),
    ))  # fmt: skip


def test_savings_tell_the_pruner_from_early_stopping(sqlite_demo):
    coordinator = Coordinator(sqlite_demo.url, sqlite_demo.name)
    # complete 4+4+4, pruned 2+1; the failed and the running trial are left out
    before = EpochSavings(trials=5, search_epochs=4, epochs_run=15, by_pruner=5, by_patience=0, pruned=2, stopped=0)
    assert epoch_savings(coordinator.load().get_trials(deepcopy=False), 4) == before
    assert "; early stopping (--patience) ended no trial early." in _sections(sqlite_demo)["savings"].note
    _add_trial(sqlite_demo, "COMPLETE", [0.9, 0.7], epochs_run=2, stopped_epoch=2)  # --patience ended it
    after = EpochSavings(trials=6, search_epochs=4, epochs_run=17, by_pruner=5, by_patience=2, pruned=2, stopped=1)
    assert epoch_savings(coordinator.load().get_trials(deepcopy=False), 4) == after
    sections = _sections(sqlite_demo)
    assert sections["savings"].note.startswith(
        "The search ran 17 of the 24 epochs its 6 trials (complete and pruned) would have run had each gone all 4 "
        "search epochs. The median pruner saved 5 epochs (21%) by pruning 2 trials; early stopping (--patience) "
        "saved 2 (8%) by ending 1 trial early, complete. Failed trials are left out."
    )
    bars = {bar.name: list(bar.y) for bar in sections["savings"].figure.data}
    assert bars["saved by the pruner"] == [0, 2, 0, 0, 3, 0] and bars["saved by early stopping"] == [0, 0, 0, 0, 0, 2]
    assert sections["curves"].note == (
        "val_loss after each epoch. Of 8 trials: 3 complete after all 4 search epochs (blue); 1 complete, ended early "
        "by --patience after epochs without improvement (blue, shorter); 2 pruned by the median pruner (orange, "
        "ending in ×); 1 failed (red); 1 running (grey)."
    )


def test_values_that_span_decades_get_a_log_axis(sqlite_demo, make_demo, tmp_path):
    sections = _sections(sqlite_demo)  # 0.4 .. 1.5: linear
    assert sections["history"].figure.layout.yaxis.type is None and "logarithmic" not in sections["history"].note
    assert sections["curves"].figure.layout.yaxis.type is None
    wide = make_demo(sqlite_demo.url, sqlite_demo.project_dir, name="wide", trials=0, running=False)
    for curve in ([200.0, 90.0], [50.0, 3.0], [40.0, 0.5]):
        _add_trial(wide, "COMPLETE", curve)
    sections = _sections(wide)
    for key in ("history", "curves"):
        assert sections[key].figure.layout.yaxis.type == "log", key
        assert sections[key].note.endswith("The value axis is logarithmic: the values span more than a decade.")


def test_learning_curves_show_pruned_trials_cut_short(sqlite_demo):
    figure = _sections(sqlite_demo)["curves"].figure
    by_state: dict[str, list] = {}
    for trace in figure.data:
        by_state.setdefault(trace.legendgroup, []).append(trace)
    assert {k: len(v) for k, v in by_state.items()} == {"COMPLETE": 3, "PRUNED": 2, "FAIL": 1, "RUNNING": 1}
    assert all(max(t.x) == 4 for t in by_state["COMPLETE"])
    assert sorted(max(t.x) for t in by_state["PRUNED"]) == [1, 2]
    assert all(t.marker.symbol[-1] == "x" for t in by_state["PRUNED"])
    assert [t.showlegend for t in by_state["PRUNED"]] == [True, False]  # one legend entry per state


def test_timeline_has_one_row_per_worker(sqlite_demo):
    figure = _sections(sqlite_demo)["timeline"].figure
    rows = {(trace.name, y, text) for trace in figure.data for y, text in zip(trace.y, trace.text, strict=True)}
    assert {r[1] for r in rows} == {"nodeA:11:0", "nodeB:22:0"}
    assert ("complete", "nodeA:11:0", "2") in rows and ("running", "nodeB:22:0", "6") in rows


def test_too_few_trials_give_notes_not_errors(make_demo, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    few = make_demo(storage.sqlite_url(project / "optuna.db"), project, trials=2, running=False)
    sections = _sections(few)
    assert sections["importance"].figure is None
    assert "Not enough complete trials" in sections["importance"].note and "1 complete" in sections["importance"].note
    empty = make_demo(storage.sqlite_url(project / "optuna.db"), project, name="empty", trials=0, running=False)
    page = render_page(Coordinator(empty.url, "empty"), build_sections(Coordinator(empty.url, "empty")))
    assert re.findall(r'data-(?:figure|note)="(\w+)"', page) == [*SECTIONS[:-1], "failures", "timeline", "trials"]
    assert "No complete trial yet." in page and "No failed trials." in page


def test_attaching_needs_a_parent_run_unless_told_not_to(sqlite_demo, tmp_path, monkeypatch, search_main):
    monkeypatch.chdir(tmp_path)
    code, _, err = search_main(["report", *sqlite_demo.flags()])
    assert code == 2 and err.startswith("error: study 'demo' has no MLflow parent run"), err
    code, out, _ = search_main(["report", *sqlite_demo.flags(), "--no-mlflow"])
    assert code == 0 and out.startswith("wrote demo-report.html") and "attached" not in out
    assert (tmp_path / "demo-report.html").stat().st_size > 1_000_000  # plotly.js is in it


def test_report_sums_up_failures_and_the_time_pruning_saved(sqlite_demo):
    from search.observation._report_tables import seconds_saved
    from search.observation._trials import trial_rows

    sections = _sections(sqlite_demo)
    assert sections["failures"].note == "1 × diverged at epoch 1"
    assert "<td>1</td><td>diverged at epoch 1</td>" in sections["failures"].html
    table = sections["trials"].html
    assert table.count("<tr class=") == 7 and 'data-col="0"' in table  # every trial, sortable headers
    rows = trial_rows(Coordinator(sqlite_demo.url, sqlite_demo.name))
    rows = [r if r.state != "PRUNED" else type(r)(**{**r.__dict__, "fit_seconds": 6.0}) for r in rows]
    saved, spent = seconds_saved(rows, search_epochs=4)
    assert saved == 6.0 / 2 * 2 + 6.0 / 1 * 3  # each pruned trial's own seconds per epoch x the epochs it skipped


def test_time_saved_is_estimated_per_trial_and_always_stated(sqlite_demo):
    from search.observation._report_tables import seconds_saved
    from search.observation._savings import savings_section
    from search.observation._trials import trial_rows

    rows = trial_rows(Coordinator(sqlite_demo.url, sqlite_demo.name))
    pruned = next(r for r in rows if r.state == "PRUNED" and r.epochs == 2)
    # A retry resumed at epoch 1 trained one epoch in its 6 s: 6 s per epoch, two epochs skipped.
    resumed = type(pruned)(**{**pruned.__dict__, "fit_seconds": 6.0, "extra": {"resumed_from_epoch": 1}})
    assert seconds_saved([resumed], search_epochs=4) == (12.0, 6.0)
    trials = Coordinator(sqlite_demo.url, sqlite_demo.name).load().get_trials(deepcopy=False)
    note = savings_section(trials, 4, "median", (12.0, 6.0)).note
    assert "the pruner saved about 12s, 67% of the 18s the trials would have trained unpruned (an estimate" in note
    unpruned = [t for t in trials if t.state.name == "COMPLETE"]
    assert "In training time the pruner saved nothing (the trials trained 30s)." in \
        savings_section(unpruned, 4, "median", (0.0, 30.0)).note  # fmt: skip
    assert "cannot be estimated" in savings_section(trials, 4, "median", (0.0, 30.0)).note


def test_run_links_go_to_an_http_server_without_its_credentials(tmp_path):
    from search.observation._report_tables import mlflow_run_link
    from search.settings import Locations

    def link(uri: str) -> str:
        loc = Locations(tmp_path, "sqlite:///x.db", uri, None, tmp_path, embedded=True)
        return str(mlflow_run_link(loc, "3")("0123456789abcdef"))

    assert link(f"https://bob:{FAKE_PASSWORD}@mlflow.example:5000/") == \
        '<a href="https://mlflow.example:5000/#/experiments/3/runs/0123456789abcdef">01234567</a>'  # fmt: skip
    text = '<code title="0123456789abcdef">01234567</code>'  # the id's head, the whole id on hover
    assert link("databricks") == link(f"sqlite:///{tmp_path}/mlflow.db") == text
    assert mlflow_run_link(None, "3")(None) == "-"


def test_trials_table_shows_speed_columns_that_some_trial_has(sqlite_demo):
    from search.observation._report_tables import trials_table
    from search.observation._trials import trial_rows

    rows = trial_rows(Coordinator(sqlite_demo.url, sqlite_demo.name))
    plain = trials_table(rows, lambda run_id: "")
    assert "samples/s" not in plain and "MFU" not in plain
    first = type(rows[0])(**{**rows[0].__dict__, "extra": {"samples_per_second": 1234.5, "mfu": 0.4123}})
    table = trials_table([first, *rows[1:]], lambda run_id: "")
    assert "<th" in table and ">samples/s</th>" in table and ">MFU</th>" in table and "peak MiB" not in table
    assert '<td data-sort="0.4123">0.4123</td>' in table and '<td data-sort="1234.5">1234</td>' in table
    assert table.count('<td data-sort="">-</td>') >= 2 * (len(rows) - 1)  # trials without them show "-"
