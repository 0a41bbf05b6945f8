"""`search trials --sort KEY --top N`: choosing a model by any metric a trial logged."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta

import pytest

# number: (state, value, final metrics); study minimizes val_loss over 4 search epochs
TRIALS = [
    ("COMPLETE", 0.50, {"val_loss": 0.52, "val_accuracy": 0.80, "val_f1": 0.78, "train_loss": 0.40}),
    ("COMPLETE", 0.30, {"val_loss": 0.31, "val_accuracy": 0.86, "val_f1": 0.85, "train_loss": 0.25,
                        "params": 5000.0, "latency_ms": 0.9}),
    ("PRUNED", None, {"val_loss": 0.90, "val_accuracy": 0.91, "val_f1": 0.60, "train_loss": 0.85}),
    ("COMPLETE", 0.40, {"val_loss": 0.40, "val_accuracy": 0.88, "val_f1": 0.81, "train_loss": 0.33,
                        "params": 900.0, "latency_ms": 0.2}),
    ("FAIL", None, {}),
    ("COMPLETE", 0.45, {}),  # finished before trials kept their final metrics
]  # fmt: skip


@pytest.fixture
def metrics_demo(tmp_path, make_demo):
    import optuna
    from optuna.distributions import FloatDistribution

    import storage

    demo = make_demo(storage.sqlite_url(tmp_path / "optuna.db"), tmp_path, trials=0, running=False)
    study = optuna.load_study(study_name=demo.name, storage=demo.url)
    start = datetime.now() - timedelta(minutes=10)
    for number, (state, value, metrics) in enumerate(TRIALS):
        attrs = {"worker": "w:1:0", "epochs_run": 4 - number % 3}
        if metrics:
            attrs["final_metrics"] = metrics
        study.add_trial(optuna.trial.FrozenTrial(
            number=number, state=optuna.trial.TrialState[state], value=value, datetime_start=start,
            datetime_complete=start + timedelta(seconds=10 + 7 * (number * 5 % 6)), params={"lr": 0.01 * (number + 1)},
            distributions={"lr": FloatDistribution(1e-3, 1.0)}, user_attrs=attrs, system_attrs={},
            intermediate_values={1: 1.0}, trial_id=number,
        ))  # fmt: skip
    return demo


def _numbers(search_main, demo, *args: str) -> list[int]:
    code, out, err = search_main(["trials", *demo.flags(), "--json", *args])
    assert code == 0, err
    return [r["number"] for r in json.loads(out)]


def test_sort_by_any_final_metric_best_first_and_keep_the_top(metrics_demo, search_main):
    assert _numbers(search_main, metrics_demo) == [0, 1, 2, 3, 4, 5]  # number order unless told
    assert _numbers(search_main, metrics_demo, "--sort", "value") == [1, 3, 5, 0, 2, 4]  # minimize; no value last
    assert _numbers(search_main, metrics_demo, "--sort", "val_accuracy") == [2, 3, 1, 0, 4, 5]  # higher is better
    assert _numbers(search_main, metrics_demo, "--sort", "train_loss") == [1, 3, 0, 2, 4, 5]  # a loss: lower
    assert _numbers(search_main, metrics_demo, "--sort", "latency_ms")[:2] == [3, 1]  # a cost: lower
    assert _numbers(search_main, metrics_demo, "--sort", "params")[:2] == [3, 1]
    assert _numbers(search_main, metrics_demo, "--sort", "val_f1:asc") == [2, 0, 3, 1, 4, 5]
    assert _numbers(search_main, metrics_demo, "--sort", "value:desc", "--top", "2") == [0, 5]
    assert _numbers(search_main, metrics_demo, "--sort", "val_f1", "--state", "complete", "--top", "2") == [1, 3]
    assert _numbers(search_main, metrics_demo, "--top", "3") == [1, 3, 5]  # "top" alone: by the objective
    assert _numbers(search_main, metrics_demo, "--sort", "epochs", "--top", "1") == [2]  # 4 - 2 % 3 = 2 epochs
    durations = _numbers(search_main, metrics_demo, "--sort", "duration")
    assert durations == [0, 5, 4, 3, 2, 1]  # 10 + 7 * (5n mod 6) seconds: shortest first


def test_unknown_sort_key_is_one_line_naming_the_choices(metrics_demo, search_main):
    code, out, err = search_main(["trials", *metrics_demo.flags(), "--sort", "val_auc"])
    assert (code, out) == (2, "")
    assert err == ("error: --sort val_auc: no trial has it; sort by one of: value, duration, epochs, train_loss, "
                   "val_accuracy, val_f1, val_loss, params, latency_ms\n")  # fmt: skip
    code, _, err = search_main(["trials", *metrics_demo.flags(), "--sort", "val_f1:up"])
    assert code == 2 and err == "error: --sort val_f1:up: the order after ':' is asc or desc\n"
    code, _, err = search_main(["trials", *metrics_demo.flags(), "--top", "0"])
    assert code == 2 and "--top" in err


def test_every_final_metric_is_a_column_in_text_csv_and_json(metrics_demo, search_main):
    code, out, _ = search_main(["trials", *metrics_demo.flags(), "--sort", "val_accuracy"])
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:7] == ["#", "state", "value", "train_loss", "val_acc", "val_f1", "val_loss"]
    assert lines[0].split()[7:9] == ["params", "latency_ms"]  # the model's metrics first, then what it costs
    assert lines[1].split()[:7] == ["2", "PRUNED", "-", "0.85", "0.91", "0.6", "0.9"]
    assert lines[-2].split()[:10] == ["4", "FAIL", "-", "-", "-", "-", "-", "-", "-", "3"]
    assert lines[-2].endswith("no reason recorded")  # a failed trial without a reason does not break the table
    assert lines[-1].split()[:7] == ["5", "COMPLETE", "0.45", "-", "-", "-", "-"]

    code, out, _ = search_main(["trials", *metrics_demo.flags(), "--json"])
    rows = json.loads(out)
    assert rows[1]["metrics"] == TRIALS[1][2] and rows[5]["metrics"] == {}
    assert "final_metrics" not in rows[1]["extra"]
    code, out, _ = search_main(["trials", *metrics_demo.flags(), "--csv"])
    table = list(csv.DictReader(io.StringIO(out)))
    assert float(table[1]["metrics.val_f1"]) == 0.85 and table[5]["metrics.val_f1"] == ""
    flattened = {f"{k}.{n}" if isinstance(v, dict) else k for r in rows for k, v in r.items()
                 for n in (v if isinstance(v, dict) else [None])}  # fmt: skip
    assert set(table[0]) == flattened  # the CSV carries every field of the JSON


def test_a_finished_trial_keeps_its_last_epochs_model_metrics(claimed_sleep_trial):
    """One write at the trial's end, with the other attributes: no MLflow look-up per trial later."""
    from search.execution._trial import run_trial

    ctx, trial = claimed_sleep_trial()
    run_trial(ctx, trial)
    stored = ctx.coordinator.storage.get_trial(trial._trial_id)
    final = stored.user_attrs["final_metrics"]
    model = {"train_loss", "val_loss", "val_rmse"}  # the sleep study is a regression: no accuracy
    # Its model has one parameter and no matmul: no FLOPs to count. Peak RSS: read from Linux's /proc.
    deployment = {"params", "latency_ms", "latency_ms_batch", "peak_rss_mb"}
    assert set(final) == model | deployment
    assert final["val_loss"] == pytest.approx(stored.intermediate_values[max(stored.intermediate_values)])
    assert final["params"] == 1 and final["latency_ms"] > 0 and final["peak_rss_mb"] > 0
    run = ctx.tracker.client.get_run(stored.user_attrs["mlflow_run_id"])
    assert {k: run.data.metrics[k] for k in deployment} == {k: final[k] for k in deployment}
    assert run.data.params["latency_batch"] == "64"
