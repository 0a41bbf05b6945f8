"""The Python API: the README's example runs as written, and the calls say what the commands say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"


def _readme_example() -> str:
    text = README.read_text()
    section = text[text.index("## Python API") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("api")
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", _readme_example()], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    return work, proc


@pytest.mark.slow
def test_the_readme_python_example_runs_as_written(example_run):
    work, proc = example_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "0 4 1" in lines  # exit code, trials finished, champion version
    assert any(line.startswith("resmlp: 4/4 finished") and line.endswith("ETA done") for line in lines)
    assert (work / "demo" / "optuna.db").exists()


@pytest.mark.slow
def test_the_calls_match_the_commands(example_run, warm_cli):
    import search

    work, _ = example_run
    where = {"project_dir": work / "demo"}
    df = search.trials("resmlp", **where)
    assert len(df) == 4 and {"number", "state", "value", "params", "epochs", "mlflow_run_id"} <= set(df.columns)
    best = search.best("resmlp", **where)
    from_cli = warm_cli("best", "--name", "resmlp", "--project-dir", str(work / "demo"), "--json", cwd=work, check=True)
    import json

    assert best == json.loads(from_cli.stdout)
    path = search.export("resmlp", output=work / "model.onnx", **where)
    assert path == work / "model.onnx" and path.stat().st_size > 0
    assert search.status("resmlp", **where).done


def test_bad_arguments_are_search_errors(tmp_path):
    import search

    with pytest.raises(search.SearchError, match="unknown argument storag;"):
        search.status("resmlp", storag="x")
    with pytest.raises(search.SearchError, match="is not a valid study name"):
        search.trials("../x", project_dir=tmp_path)
    with pytest.raises(search.SearchError, match="--trials must be a positive number"):
        search.start("resmlp", trials=0, project_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
