"""`search lr-find`: a suggestion, a range and a plot in seconds on CPU for resmlp."""

from __future__ import annotations

import re


def test_lr_find_on_resmlp_prints_a_range_and_writes_a_plot(cli, tmp_path):
    proc = cli("lr-find", "--study", "resmlp", "--params", "batch_size=64", "-o", "lr.html", cwd=tmp_path, check=True)
    found = re.search(r"suggested learning rate ([\d.e-]+); range to search ([\d.e-]+) \.\. ([\d.e-]+)", proc.stdout)
    assert found, proc.stdout
    suggested, low, high = (float(v) for v in found.groups())
    assert low < suggested <= high and 1e-5 < suggested < 1.0
    assert "batch_size=64" in proc.stdout
    page = (tmp_path / "lr.html").read_text()
    assert "learning-rate range test" in page and "plotly" in page
    assert proc.stderr.strip() == ""


def test_lr_find_refuses_an_unknown_parameter_in_one_line(cli, tmp_path):
    proc = cli("lr-find", "--study", "resmlp", "--params", "learning_rate=0.1", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: --params: no parameter learning_rate in the study's space (lr,")
    assert list(tmp_path.iterdir()) == []
