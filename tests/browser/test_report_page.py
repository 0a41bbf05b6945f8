"""`search report` in a browser: every figure drawn, nothing in the console."""

from __future__ import annotations

import re

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
    runs = [t.user_attrs["mlflow_run_id"] for t in sorted(study.trials, key=lambda t: t.number)]
    header = next(h for h in driver.find_elements(By.CSS_SELECTOR, "table.trials th") if h.text == "trial")
    header.click()  # back to trial order; tracking is no server here, so each run id is shown as text
    assert column("MLflow run") == runs
    assert [e.text for e in driver.find_elements(By.CSS_SELECTOR, "table.trials tbody td code")] == runs

    def section(key: str) -> str:
        return str(driver.find_element(By.CSS_SELECTOR, f"section#{key}").text)

    assert "Not retrained yet" in section("champion")  # the small search ran with --no-retrain
    failed = [t for t in study.trials if t.state.name == "FAIL"]
    if failed:
        counts = driver.find_elements(By.CSS_SELECTOR, "table.failures tbody tr td:first-child")
        assert sum(int(c.text) for c in counts) == len(failed)
    else:
        assert "No failed trials." in section("failures")
    savings = section("savings")
    assert re.search(r"pruning saved \d+ epochs", savings) and "In training time" in savings, savings
    if any(t.state.name == "PRUNED" for t in study.trials):
        assert re.search(r"about \S+ saved, \d+% of the \S+ the trials would have trained \(an estimate", savings)
    assert driver.find_elements(By.CSS_SELECTOR, "section#slices .js-plotly-plot")
    problems = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert problems == []
