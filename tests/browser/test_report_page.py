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
    assert sections == ["history", "curves", "parallel", "importance", "savings", "timeline"]
    with_figure = driver.find_elements(By.CSS_SELECTOR, "section[data-figure]")
    assert len(with_figure) >= 5  # only importances may be a note, when too few trials completed
    WebDriverWait(driver, 60).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "section[data-figure] .js-plotly-plot")) == len(with_figure)
    )
    for section in with_figure:  # drawn, not just a placeholder div: plotly puts an SVG in each
        assert section.find_elements(By.CSS_SELECTOR, ".js-plotly-plot svg.main-svg")
    problems = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert problems == []
    screenshot(driver, "report", full_page=True)
