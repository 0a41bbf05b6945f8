"""`search report` in a browser: every figure drawn, nothing in the console."""

from __future__ import annotations

import re

import pytest
from browser_helpers import screenshot, search_cli

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def plain_report(small_search, tmp_path_factory):
    """The small search's report without MLflow links, written once: the tests below only read it."""
    page = tmp_path_factory.mktemp("plain-report") / "report.html"
    search_cli("report", "--name", small_search.name, "-o", str(page), "--no-mlflow", cwd=small_search.workdir)
    return page


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
    screenshot(driver, "report", full_page=True, width=1280)


def test_report_fits_a_1280_pixel_screen(plain_report, driver):
    """Nothing wider than the page; the trials table, wider than the screen with its metrics,
    parameters and deployment metrics, scrolls sideways inside its own box, in view."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.set_window_size(1280, 900)
    driver.get(plain_report.as_uri())
    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "section#trials table.trials"))
    layout = driver.execute_script("""
        var page = document.documentElement, body = document.body.getBoundingClientRect();
        var box = document.querySelector("div.table-scroll"), table = box.querySelector("table");
        var wider = Array.from(document.querySelectorAll("body *")).filter(function (e) {
          var r = e.getBoundingClientRect();
          var offscreen = r.right <= 0 || r.bottom <= 0;  // plotly's text-measuring nodes sit at -10000px
          return r.width > 0 && !offscreen && !box.contains(e) && (r.right > body.right + 1 || r.left < body.left - 1);
        }).map(function (e) { return e.tagName + "." + e.getAttribute("class"); });
        return {viewport: page.clientWidth, scroll: page.scrollWidth, wider: wider,
                box: box.getBoundingClientRect().right, table: table.getBoundingClientRect().right,
                boxHeight: box.getBoundingClientRect().height, overflow: getComputedStyle(box).overflowX};
    """)
    screenshot(driver, "report-1280", full_page=True, width=1280)
    assert layout["scroll"] <= layout["viewport"], layout  # no sideways scrolling of the page
    assert layout["wider"] == [], layout
    assert layout["box"] <= layout["viewport"], layout  # the box on screen; a wider table scrolls in it
    assert layout["overflow"] == "auto" and layout["boxHeight"] <= 0.8 * 900 + 1, layout


def test_report_lists_every_trial_in_a_table_that_sorts(small_search, plain_report, driver):
    import optuna
    from selenium.webdriver.common.by import By

    study = optuna.load_study(study_name=small_search.name,
                              storage=f"sqlite:///{small_search.workdir / '.search' / 'optuna.db'}")  # fmt: skip
    driver.get(plain_report.as_uri())
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
    codes = driver.find_elements(By.CSS_SELECTOR, "table.trials tbody td code")
    assert [e.get_attribute("title") for e in codes] == runs and [e.text for e in codes] == [r[:8] for r in runs]

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
    pruned = sum(t.state.name == "PRUNED" for t in study.trials)
    said = rf"pruner saved [\d,]+ epochs \(\d+%\) by pruning {pruned} trial" if pruned else "pruner pruned no trial"
    assert re.search(said, savings) and "early stopping (--patience) ended no trial early" in savings, savings
    # a trial the pruner stopped at its last epoch (2 workers: the startup trials may complete only then) saves nothing
    saved = sum(3 - len(t.intermediate_values) for t in study.trials if t.state.name == "PRUNED")
    if saved:
        assert re.search(r"the pruner saved about \S+, \d+% of the \S+ the trials would have trained unpruned", savings)
    assert driver.find_elements(By.CSS_SELECTOR, "section#slices .js-plotly-plot")
    problems = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert problems == []
