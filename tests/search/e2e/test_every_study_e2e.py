"""Every built-in study, and a study written from `search new-study`, goes all the way through
`search start`: search, full-scale retrain, test evaluation, registration, and a loadable champion."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CASES = {
    "resnet": ["--study-option", "search_epochs=1", "--study-option", "full_epochs=1"],
    "tinylm": [
        "--study-option",
        "max_chars=6000",
        "--study-option",
        "search_epochs=1",
        "--study-option",
        "full_epochs=1",
    ],  # fmt: skip
    "template": [],
}


def _champion_predicts(project: Path, name: str, study_ref: str, options: dict[str, str]) -> None:
    import mlflow
    import numpy as np

    from search.settings import load_study
    from search.settings import study_ref as resolve_ref

    mlflow.set_tracking_uri(f"sqlite:///{project}/mlflow.db")
    mlflow.set_registry_uri(f"sqlite:///{project}/mlflow.db")
    try:
        model = mlflow.pyfunc.load_model(f"models:/{name}@champion")
        example = load_study(resolve_ref(study_ref), options).load_data().raw_example
        assert example is not None, "the study gives no raw input example to log with the model"
        output = np.asarray(model.predict(example))
        assert output.shape[0] == len(example) and np.isfinite(output).all()
    finally:
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_study_searches_retrains_and_registers(cli, tmp_path, case):
    if case == "template":
        cli("new-study", "mystudy", cwd=tmp_path, check=True)
        study, name = str(tmp_path / "mystudy.py"), "mystudy"
    else:
        study, name = case, case
    flags = CASES[case]
    proc = cli("start", "--study", study, "--trials", "2", "--workers", "1", "--pruner", "none", "--quiet", *flags,
               cwd=tmp_path, check=True)  # fmt: skip
    assert f"models:/{name}@champion" in proc.stdout, proc.stdout
    assert "is the new champion" in proc.stdout, proc.stdout
    options = dict(flag.split("=", 1) for flag in flags if flag != "--study-option")
    _champion_predicts(tmp_path / ".search", name, study, options)
