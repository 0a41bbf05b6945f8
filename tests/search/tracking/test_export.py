"""A portable champion: ONNX and TorchScript files checked against PyTorch, logged, and written by `search export`;
and its int8 copy (`--quantize int8`), on the embedded SQLite stores and on PostgreSQL ones (conftest.py).
The champion behind MLflow's model server (`search serve`) is test_serve.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

ORT = pytest.importorskip("onnxruntime")


@pytest.mark.slow
def test_the_retrain_logs_checked_onnx_and_torchscript_files(resmlp_champion):
    from mlflow import MlflowClient

    uri = resmlp_champion.tracking_uri
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

    uri = resmlp_champion.tracking_uri
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

    project = resmlp_champion.project
    proc = warm_cli("export", "--study", "resmlp", cwd=project, check=True)
    assert "wrote resmlp-v1.onnx" in proc.stdout
    warm_cli("export", "--study", "resmlp", "--format", "torchscript", "-o", "m.pt", cwd=project, check=True)

    rows, _ = load_digits(return_X_y=True)
    rows = rows[:300].astype("float32")  # raw pixel rows: the preprocessing is inside the file
    expected = resmlp_champion.predict(rows)
    session = ORT.InferenceSession(str(project / "resmlp-v1.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 7, 300):  # the batch dimension is dynamic
        got = session.run(None, {session.get_inputs()[0].name: rows[:batch]})[0]
        np.testing.assert_allclose(got, expected[:batch], rtol=1e-4, atol=1e-4)
    scripted = torch.jit.load(str(project / "m.pt"))
    with torch.no_grad():
        np.testing.assert_allclose(scripted(torch.as_tensor(rows)).numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_export_of_a_missing_version_is_one_line(resmlp_champion, warm_cli):
    proc = warm_cli("export", "--study", "resmlp", "--version", "7", cwd=resmlp_champion.project)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: registered model 'resmlp' has no version 7; run `search retrain`"


def _reported(text: str) -> dict[str, dict[str, float]]:
    """The float32 and int8 rows of `search export --quantize`'s table: size in bytes, metrics."""
    lines = text.splitlines()
    head = next(line.split() for line in lines if "latency/sample" in line)
    rows = {}
    for line in lines:
        cells = line.split()
        if line.startswith("  ") and cells[0] in ("float32", "int8"):
            size = float(cells[1]) * {"kB": 1e3, "MB": 1e6}[cells[2]]
            rows[cells[0]] = {"bytes": size, **dict(zip(head[2:], map(float, cells[5:]), strict=True))}
    return rows


def _test_split():
    from search.settings import load_study
    from search.tracking._quantize import raw_test_rows

    data = load_study("resmlp", {"search_epochs": 1, "full_epochs": 2}).load_data()
    return (*raw_test_rows(data), data.task)


@pytest.mark.slow
def test_export_quantize_reports_sizes_and_metrics_and_writes_an_int8_file_that_predicts(champion, warm_cli):
    from search.tracking._quantize import onnx_session, score

    project = champion.project
    proc = warm_cli("export", "--study", "resmlp", "--quantize", "int8", "--quantize-tolerance", "1",
                    "-o", "q/m.onnx", *champion.flags, cwd=project, check=True)  # fmt: skip
    float_file, int8_file = project / "q" / "m.onnx", project / "q" / "m.int8.onnx"
    assert f"wrote {int8_file.relative_to(project)}" in proc.stdout
    reported = _reported(proc.stdout)
    for label, path in (("float32", float_file), ("int8", int8_file)):  # sizes to the printed precision
        assert reported[label]["bytes"] == pytest.approx(path.stat().st_size, rel=0.01)
    assert int8_file.stat().st_size < float_file.stat().st_size / 2

    rows, targets, task = _test_split()  # the split the champion was tested on: its float metric agrees
    registered = champion.run().data.metrics["test_loss"]
    assert reported["float32"]["test_loss"] == pytest.approx(registered, abs=1e-3)
    session = onnx_session(int8_file)  # the int8 file loads, predicts, and its metrics are the ones printed
    outputs = session.run(None, {"input": rows})[0]
    for name, value in score(outputs, targets, task).items():
        assert reported["int8"][name] == pytest.approx(value, abs=1e-4)
    expected = champion.predict(rows)
    assert outputs.shape == expected.shape and not np.array_equal(outputs, expected)  # int8, not a float copy
    assert (outputs.argmax(1) == expected.argmax(1)).mean() >= 0.9


@pytest.mark.slow
def test_export_quantize_refuses_int8_past_the_tolerance_and_writes_no_int8_file(resmlp_champion, warm_cli):
    project = resmlp_champion.project
    (project / "r").mkdir(exist_ok=True)
    (project / "r" / "m.int8.onnx").write_bytes(b"an earlier run's int8 file")  # of another float file
    proc = warm_cli("export", "--study", "resmlp", "--quantize", "int8", "--quantize-tolerance", "-1",
                    "-o", "r/m.onnx", cwd=project)  # fmt: skip
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()  # -1: int8 must beat float by 100%, which no loss can
    assert line.startswith("error: int8 test_loss ") and "tolerance -100.00%: int8 refused" in line
    assert set(_reported(proc.stdout)) == {"float32", "int8"}  # measured, and shown
    assert (project / "r" / "m.onnx").stat().st_size > 0  # the float export stands
    assert not (project / "r" / "m.int8.onnx").exists()  # nor is a stale one left beside it
    proc = warm_cli("export", "--study", "resmlp", "--format", "torchscript", "--quantize", "int8", cwd=project)
    assert proc.returncode == 2 and "leave out --format torchscript" in proc.stderr


def test_the_tolerance_is_relative_to_the_float_metric_in_the_study_direction():
    from search.tracking._quantize import Measurement, QuantizeReport, relative_worsening

    assert relative_worsening(0.50, 0.51, "minimize") == pytest.approx(0.02)
    assert relative_worsening(0.90, 0.88, "maximize") == pytest.approx(0.02 / 0.9)
    assert relative_worsening(0.90, 0.95, "maximize") < 0  # better
    assert relative_worsening(0.0, 0.1, "minimize") == float("inf")

    def report(int8_loss: float, tolerance: float) -> QuantizeReport:
        return QuantizeReport("test_loss", "minimize", tolerance, Measurement(4000, 0.05, {"test_loss": 0.5}),
                              Measurement(1000, 0.02, {"test_loss": int8_loss}), 10)  # fmt: skip

    assert report(0.504, 0.01).accepted and not report(0.506, 0.01).accepted
    assert not report(float("nan"), 0.01).accepted


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
