"""Trials in MLflow: comparable runs (same names), listed under the study's run in `search mlflow`."""

from __future__ import annotations

import pytest
from browser_helpers import free_port, screenshot, wait_for_text


def _runs(small_search) -> tuple[object, list]:
    from mlflow import MlflowClient

    client = MlflowClient(small_search.tracking_uri)
    experiment = client.get_experiment_by_name(small_search.name)
    return client, client.search_runs([experiment.experiment_id], max_results=100)


@pytest.mark.slow
def test_trial_runs_share_param_and_metric_names(small_search):
    """MLflow's compare view lines runs up by name: every trial must log the same keys."""
    client, runs = _runs(small_search)
    [parent] = [r for r in runs if r.data.tags.get("hpsearch.role") == "study"]
    trials = [r for r in runs if r.data.tags.get("hpsearch.role") == "trial"]
    assert sorted(r.info.run_name for r in trials) == [f"trial-{n}" for n in range(small_search.trials)]
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {parent.info.run_id}
    assert len({frozenset(r.data.params) for r in trials}) == 1
    from search.tracking._deployment import DEPLOYMENT_METRICS

    trained = [r for r in trials if r.data.tags["hpsearch.state"] in ("COMPLETE", "PRUNED")]
    # Training's metrics alike on every trained trial; the deployment metrics alike on the complete ones
    # (a pruned trial is not timed: README, "Deployment metrics").
    assert trained and len({frozenset(set(r.data.metrics) - set(DEPLOYMENT_METRICS)) for r in trained}) == 1
    complete = [r for r in trained if r.data.tags["hpsearch.state"] == "COMPLETE"]
    assert complete and len({frozenset(set(r.data.metrics) & set(DEPLOYMENT_METRICS)) for r in complete}) == 1
    assert {"params", "latency_ms"} <= set(complete[0].data.metrics)
    assert {"val_loss", "train_loss", "lr"} <= set(trained[0].data.metrics)
    for run in trained:  # one point per epoch run, on the same step axis
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")]
        assert steps == list(range(1, int(run.data.tags["hpsearch.epochs_run"]) + 1))


@pytest.mark.browser
@pytest.mark.slow
def test_mlflow_ui_lists_the_trials_under_the_study_run(small_search, serve, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = free_port()
    server = serve(["mlflow", "--name", small_search.name, "--port", str(port)], cwd=small_search.workdir)
    url = server.wait_for_url(timeout=180)
    assert url.startswith(f"http://127.0.0.1:{port}/#/experiments/") and url.endswith(
        "/runs?workflowType=machine_learning"
    )
    driver.get(url)
    wait_for_text(driver, small_search.name, "Runs", "Model training")
    # The model-training view (runs, models), not MLflow 3's default GenAI one (traces, judges, prompts).
    assert "Judges" not in driver.find_element(By.TAG_NAME, "body").text
    if "trial-0" not in driver.find_element(By.TAG_NAME, "body").text:
        # Child runs start folded under their parent: unfold it with the row's expander button.
        expander = ".ag-row button[data-component-id*='runnamecellrenderer']"
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, expander))[0].click()
    wait_for_text(driver, *(f"trial-{n}" for n in range(small_search.trials)))
    screenshot(driver, "mlflow-runs")
