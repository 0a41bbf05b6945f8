"""`search lr-find`: a suggestion, a range and a plot in seconds on CPU for resmlp."""

from __future__ import annotations

import re

import pytest


@pytest.mark.slow
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


@pytest.mark.slow
def test_apply_narrows_the_next_search_and_the_study_records_it(cli, tmp_path):
    import json

    import optuna

    (tmp_path / "search.toml").write_text('[search]\nstudy = "resmlp"\n')
    proc = cli("lr-find", "--study", "resmlp", "--apply", cwd=tmp_path, check=True)
    entry = re.search(r"narrows new searches to (lr=[\d.e-]+:[\d.e-]+)", proc.stdout).group(1)
    low, high = (float(v) for v in entry.split("=")[1].split(":"))
    assert 1e-4 <= low < high <= 1e-2  # within the study's own lr range
    text = (tmp_path / "search.toml").read_text()
    assert text.startswith('[search]\nstudy = "resmlp"\n') and f'narrow = ["{entry}"]' in text

    start = cli("start", "--trials", "3", "--workers", "1", "--study-option", "search_epochs=1", "--no-retrain",
                cwd=tmp_path, check=True)  # fmt: skip
    assert f"narrowed: lr searched in {low:g} .. {high:g}" in start.stdout
    study = optuna.load_study(study_name="resmlp", storage=f"sqlite:///{tmp_path / '.search' / 'optuna.db'}")
    assert json.loads(study.user_attrs["hpsearch.spec"])["narrow"] == {"lr": [low, high]}
    assert all(low <= t.params["lr"] <= high for t in study.trials) and len(study.trials) == 3

    again = cli("start", "--trials", "3", "--narrow", "lr=1e-3:2e-3", cwd=tmp_path)  # a resumed study keeps its space
    assert again.returncode == 2 and "--narrow lr=0.001:0.002 differs from the study's stored ranges" in again.stderr


@pytest.mark.slow
def test_a_narrow_range_outside_the_study_is_refused_and_creates_nothing(cli, tmp_path):
    proc = cli("start", "--study", "resmlp", "--trials", "2", "--narrow", "lr=1:2", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --narrow lr=1:2 is outside the study's range 0.0001:0.01"
    assert list(tmp_path.iterdir()) == []


def test_set_command_default_keeps_the_file_and_replaces_its_own_key(tmp_path):
    import tomllib

    from search.cli._settings import set_command_default

    path = tmp_path / "search.toml"
    set_command_default(path, "start", "narrow", ["lr=0.001:0.01"])
    assert tomllib.loads(path.read_text()) == {"search": {"start": {"narrow": ["lr=0.001:0.01"]}}}

    path.write_text(
        'trials = 5  # top-level keys: the file has no [search] table\n[start]\nworkers = 2\nnarrow = ["x=1:2"]\n'
    )
    set_command_default(path, "start", "narrow", ["lr=0.002:0.02"])
    assert tomllib.loads(path.read_text()) == {"trials": 5, "start": {"workers": 2, "narrow": ["lr=0.002:0.02"]}}


@pytest.mark.slow
def test_lr_find_takes_its_flags_from_search_toml(cli, tmp_path):
    (tmp_path / "search.toml").write_text('[search]\nstudy = "resmlp"\n[search.lr-find]\nsteps = 40\n')
    proc = cli("lr-find", cwd=tmp_path, check=True)
    steps = int(re.search(r"  (\d+) steps in", proc.stdout).group(1))
    assert 10 <= steps <= 40, proc.stdout
    (tmp_path / "search.toml").write_text("[search.lr-find]\nstepz = 40\n")
    bad = cli("lr-find", "--study", "resmlp", cwd=tmp_path)
    assert bad.returncode == 2 and "'stepz' is not a flag of `search lr-find` (did you mean 'steps'?)" in bad.stderr
