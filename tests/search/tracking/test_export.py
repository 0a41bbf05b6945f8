"""A portable champion: ONNX and TorchScript files checked against PyTorch, logged, and written by `search export`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

ORT = pytest.importorskip("onnxruntime")


def _champion_predict(tmp_path: Path, rows: np.ndarray) -> np.ndarray:
    """The registered PyTorch model's outputs, as MLflow serves it."""
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / '.search' / 'mlflow.db'}")
    mlflow.set_registry_uri(f"sqlite:///{tmp_path / '.search' / 'mlflow.db'}")
    return np.asarray(mlflow.pyfunc.load_model("models:/resmlp@champion").predict(rows))


@pytest.fixture(scope="module")
def resmlp_champion(tmp_path_factory, cli):
    cwd = tmp_path_factory.mktemp("export")
    cli("start", "--study", "resmlp", "--trials", "1", "--workers", "1", "--study-option", "search_epochs=1",
            "--study-option", "full_epochs=2", cwd=cwd, check=True)  # fmt: skip
    return cwd


@pytest.mark.slow
def test_the_retrain_logs_checked_onnx_and_torchscript_files(resmlp_champion):
    from mlflow import MlflowClient

    uri = f"sqlite:///{resmlp_champion / '.search' / 'mlflow.db'}"
    client = MlflowClient(uri, uri)  # the registry too: never a URI another test left behind
    version = client.get_model_version_by_alias("resmlp", "champion")
    run = client.get_run(version.run_id)
    assert run.data.tags["hpsearch.export.onnx"] == "ok"
    assert run.data.tags["hpsearch.export.torchscript"] == "ok"
    assert run.data.metrics["export_onnx_max_abs_diff"] < 1e-3
    files = {a.path for a in client.list_artifacts(version.run_id, "portable")}
    assert files == {"portable/model.onnx", "portable/model.torchscript.pt", "portable/export_checks.json"}
    checks = json.loads(Path(client.download_artifacts(version.run_id, "portable/export_checks.json")).read_text())
    assert [(c["format"], c["ok"]) for c in checks] == [("onnx", True), ("torchscript", True)]


@pytest.mark.slow
def test_the_champion_lists_its_requirements_without_mlflow_inferring_them(resmlp_champion):
    """A pt2 model's requirements are known (torch loads it): given, not inferred in a second
    process. They are the installed versions, torch's without a local label such as ``+cpu``."""
    import cloudpickle
    import mlflow
    import pandas

    uri = f"sqlite:///{resmlp_champion / '.search' / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        lines = Path(mlflow.pyfunc.get_model_dependencies("models:/resmlp@champion")).read_text().split()
    finally:
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
    assert lines == [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
        f"cloudpickle=={cloudpickle.__version__}",
        f"numpy=={np.__version__}",
        f"pandas=={pandas.__version__}",
    ]


@pytest.mark.slow
def test_search_export_writes_files_that_run_without_this_project(resmlp_champion, warm_cli):
    from sklearn.datasets import load_digits

    proc = warm_cli("export", "--study", "resmlp", cwd=resmlp_champion, check=True)
    assert "wrote resmlp-v1.onnx" in proc.stdout
    warm_cli("export", "--study", "resmlp", "--format", "torchscript", "-o", "m.pt", cwd=resmlp_champion, check=True)

    rows, _ = load_digits(return_X_y=True)
    rows = rows[:300].astype("float32")  # raw pixel rows: the preprocessing is inside the file
    expected = _champion_predict(resmlp_champion, rows)
    session = ORT.InferenceSession(str(resmlp_champion / "resmlp-v1.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 7, 300):  # the batch dimension is dynamic
        got = session.run(None, {session.get_inputs()[0].name: rows[:batch]})[0]
        np.testing.assert_allclose(got, expected[:batch], rtol=1e-4, atol=1e-4)
    scripted = torch.jit.load(str(resmlp_champion / "m.pt"))
    with torch.no_grad():
        np.testing.assert_allclose(scripted(torch.as_tensor(rows)).numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_export_of_a_missing_version_is_one_line(resmlp_champion, warm_cli):
    proc = warm_cli("export", "--study", "resmlp", "--version", "7", cwd=resmlp_champion)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: registered model 'resmlp' has no version 7; run `search retrain`"


def _study_module(name: str, options: dict[str, object]):
    """A built-in study's exported function (preprocessing + a fresh model) and its check rows."""
    import optuna

    from search.settings import load_study
    from search.tracking import export_model
    from search.tracking._portable import check_rows

    study = load_study(name, options)
    data = study.load_data()
    sampler_study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    params = study.suggest(sampler_study.ask())
    torch.manual_seed(0)
    return export_model(study.build_model(params, data), data), check_rows(data)


@pytest.mark.parametrize(
    ("name", "options", "formats"),
    [
        ("resnet", {"data": "digits"}, ("onnx", "torchscript")),
        ("tinylm", {}, ("onnx", "torchscript")),
    ],
)
@pytest.mark.slow
def test_built_in_champions_export_and_match(tmp_path, name, options, formats):
    from search.tracking._portable import export_all

    module, rows = _study_module(name, options)
    results = export_all(module, rows, tmp_path)
    for fmt in formats:
        path, check = results[fmt]
        assert check.ok, check.reason
        assert path is not None and path.exists() and check.max_abs_diff is not None
    for fmt, (path, check) in results.items():  # any other format: exported, or a reason that says why
        assert check.ok or (path is None and check.reason), (fmt, check)


class _BranchOnData(nn.Module):
    """Control flow on the values: torch.export refuses it, and a trace keeps only the branch it saw."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if float(x.sum()) > 0 else x * 3


def test_a_model_that_cannot_be_exported_gives_its_reason_and_no_file(tmp_path):
    from search.tracking._portable import export_all

    rows = torch.tensor([[1.0, 1.0], [1.0, 1.0], [-5.0, -5.0], [1.0, 1.0]])
    results = export_all(_BranchOnData(), rows, tmp_path)
    for fmt in ("onnx", "torchscript"):
        path, check = results[fmt]
        assert path is None and not check.ok and check.reason, check
    reason = results["torchscript"][1].reason  # the trace took one branch only
    assert "Tracing failed sanity checks" in reason or "differ from PyTorch" in reason
