"""`search dashboard` in a browser: the study's page, then its trial list."""

from __future__ import annotations

import pytest
from browser_helpers import free_port, screenshot, wait_for_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_dashboard_shows_the_study_and_its_trials(small_search, serve, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = free_port()
    server = serve(["dashboard", "--name", small_search.name, "--port", str(port)], cwd=small_search.workdir)
    url = server.wait_for_url(timeout=120)
    assert url == f"http://127.0.0.1:{port}/dashboard/studies/1"
    driver.get(url)
    wait_for_text(driver, f"{small_search.name} (id=1)", "History", "Hyperparameter Importance")
    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot"))
    wait_for_text(driver, "val_loss")  # the objective by its name on the history plot, not "Objective 0"
    screenshot(driver, "dashboard-study")
    driver.get(f"{url}/trials")
    text = wait_for_text(driver, *(f"Trial {n}" for n in range(small_search.trials)))
    assert f"{small_search.trials} Trials" in text
    screenshot(driver, "dashboard-trials")
