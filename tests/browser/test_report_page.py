"""`search report` in a browser: every figure drawn, nothing in the console."""

from __future__ import annotations

import pytest
from browser_helpers import screenshot, search_cli

pytestmark = pytest.mark.browser


def test_report_renders_every_figure_without_console_errors(small_search, driver, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = tmp_path / "report.html"
    search_cli("report", "--name", small_search.name, "-o", str(page), cwd=small_search.workdir)
    driver.get(page.as_uri())
    sections = [e.get_attribute("id") for e in driver.find_elements(By.CSS_SELECTOR, "section")]
    assert sections == ["champion", "history", "curves", "parallel", "importance", "slices", "savings", "failures",
                        "timeline", "trials"]  # fmt: skip
    with_figure = driver.find_elements(By.CSS_SELECTOR, "section[data-figure]")
    assert len(with_figure) >= 6  # only importances may be a note, when too few trials completed
    WebDriverWait(driver, 60).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "section[data-figure] .js-plotly-plot")) == len(with_figure)
    )
    for section in with_figure:  # drawn, not just a placeholder div: plotly puts an SVG in each
        assert section.find_elements(By.CSS_SELECTOR, ".js-plotly-plot svg.main-svg")
    problems = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert problems == []
    screenshot(driver, "report", full_page=True)


def test_report_lists_every_trial_in_a_table_that_sorts(small_search, driver, tmp_path):
    import optuna
    from selenium.webdriver.common.by import By

    page = tmp_path / "report.html"
    search_cli("report", "--name", small_search.name, "-o", str(page), "--no-mlflow", cwd=small_search.workdir)
    study = optuna.load_study(study_name=small_search.name,
                              storage=f"sqlite:///{small_search.workdir / '.search' / 'optuna.db'}")  # fmt: skip
    driver.get(page.as_uri())
    rows = driver.find_elements(By.CSS_SELECTOR, "table.trials tbody tr")
    assert len(rows) == len(study.trials)

    def column(name: str) -> list[str]:
        headers = [h.text.rstrip(" ▲▼") for h in driver.find_elements(By.CSS_SELECTOR, "table.trials th")]
        index = headers.index(name)
        return [r.find_elements(By.TAG_NAME, "td")[index].get_attribute("data-sort")
                for r in driver.find_elements(By.CSS_SELECTOR, "table.trials tbody tr")]  # fmt: skip

    assert column("trial") == [str(t.number) for t in sorted(study.trials, key=lambda t: t.number)]
    header = next(h for h in driver.find_elements(By.CSS_SELECTOR, "table.trials th") if h.text == "lr")
    header.click()
    lrs = [float(v) for v in column("lr")]
    assert lrs == sorted(lrs)
    header.click()
    assert [float(v) for v in column("lr")] == sorted(lrs, reverse=True)
    text = driver.find_element(By.TAG_NAME, "body").text
    assert "Not retrained yet" in text  # the small search ran with --no-retrain
    assert "No failed trials." in text or "×" in text
    assert driver.find_elements(By.CSS_SELECTOR, "section#slices .js-plotly-plot")
    problems = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert problems == []
