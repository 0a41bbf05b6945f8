"""A champion that runs without this project: ONNX and TorchScript files, checked before they are logged.

Each file holds the whole function users call (the preprocessing fitted on the training split,
then the model) with a dynamic batch dimension. Before a file is logged, onnxruntime (or the
loaded TorchScript module) must give the PyTorch model's outputs on the test rows within
tolerance; the largest difference is logged with it. A model that cannot be exported keeps its
reason in the run (tag ``hpsearch.export.<format>``) and is registered as a PyTorch model all the same.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError

if TYPE_CHECKING:
    from search.tracking._tracker import Tracker

log = logging.getLogger(__name__)

FORMATS = {"onnx": "model.onnx", "torchscript": "model.torchscript.pt"}
ARTIFACT_DIR = "portable"
CHECK_ROWS = 256
"""Test rows each exported file is checked on (and at a second batch size, to exercise the dynamic batch)."""
RTOL, ATOL = 1e-3, 1e-4


@dataclass(frozen=True)
class ExportCheck:
    format: str
    ok: bool
    max_abs_diff: float | None = None
    rows: int = 0
    reason: str = ""

    def line(self) -> str:
        if self.ok:
            return (f"{self.format}: exported; outputs match PyTorch on {self.rows} rows "
                    f"(max |diff| {self.max_abs_diff:.2e})")  # fmt: skip
        return f"{self.format}: not exported: {self.reason}"


def check_rows(data: Any) -> Any:
    """Inputs to check an export on: the raw example rows, then the first test rows.

    The exported function includes the preprocessing while the test split holds model inputs;
    the check compares two implementations of one function, so test rows fed to it raw are as
    good a check as raw rows, and they cover a realistic range of values.
    """
    import numpy as np
    import torch

    parts = []
    if data.raw_example is not None:
        parts.append(torch.as_tensor(np.asarray(data.raw_example)))
    test_x = getattr(data.test, "x", None)
    if test_x is not None and (
        not parts or (test_x.dtype == parts[0].dtype and test_x.shape[1:] == parts[0].shape[1:])
    ):
        parts.append(test_x[:CHECK_ROWS].cpu())
    if not parts:
        raise SearchError("the study's data has neither a raw example nor test rows to check an export on")
    rows = torch.cat(parts)
    return rows if len(rows) >= 3 else rows.repeat(3, *([1] * (rows.dim() - 1)))


def export_all(module: Any, rows: Any, out_dir: Path) -> dict[str, tuple[Path | None, ExportCheck]]:
    """Every format's file (None when it failed) and its check."""
    import copy

    results: dict[str, tuple[Path | None, ExportCheck]] = {}
    for fmt, filename in FORMATS.items():
        path = out_dir / filename
        try:
            # On a copy: torch.export may leave its traced modules in the one it was given, which
            # is also the PyTorch model that is registered next.
            _EXPORTERS[fmt](copy.deepcopy(module), rows, path)
            diff = _max_diff(module, rows, fmt, path)
        except Exception as exc:  # noqa: BLE001 - any exporter error is a reason to log, not a failed retrain
            results[fmt] = (None, ExportCheck(fmt, False, reason=_reason(exc)))
            continue
        reference = _torch_out(module, rows)
        tolerance = ATOL + RTOL * float(abs(reference).max())
        if diff > tolerance:
            check = ExportCheck(fmt, False, diff, len(rows), f"outputs differ from PyTorch by up to {diff:.3g}")
            results[fmt] = (None, check)
        else:
            results[fmt] = (path, ExportCheck(fmt, True, diff, len(rows)))
    return results


def log_portable(tracker: Tracker, run_id: str, module: Any, data: Any) -> list[ExportCheck]:
    """Export, check and log every format on ``run_id`` (the registered model's run)."""
    rows = check_rows(data)
    with tempfile.TemporaryDirectory(prefix="hpsearch-export-") as tmp:
        results = export_all(module, rows, Path(tmp))
        checks = [check for _, check in results.values()]
        for fmt, (path, check) in results.items():
            if path is not None:
                tracker.client.log_artifact(run_id, str(path), ARTIFACT_DIR)
                tracker.client.log_metric(run_id, f"export_{fmt}_max_abs_diff", float(check.max_abs_diff or 0.0))
            tracker.client.set_tag(run_id, f"hpsearch.export.{fmt}", "ok" if check.ok else check.reason[:4000])
        summary = Path(tmp) / "export_checks.json"
        summary.write_text(json.dumps([asdict(c) for c in checks], indent=2))
        tracker.client.log_artifact(run_id, str(summary), ARTIFACT_DIR)
    for check in checks:
        log.debug("%s", check.line())  # the caller prints them
    return checks


def download_portable(
    tracker: Tracker, model_name: str, version: str | None, fmt: str, output: Path
) -> tuple[str, Path]:
    """Copy a registered version's (default: the champion's) exported file to ``output``; its version and path."""
    import shutil

    from mlflow.exceptions import MlflowException

    client = tracker.client
    try:
        found = client.get_model_version(model_name, version) if version else \
            client.get_model_version_by_alias(model_name, "champion")  # fmt: skip
    except MlflowException:
        which = f"version {version}" if version else "a champion"
        raise SearchError(f"registered model {model_name!r} has no {which}; run `search retrain`") from None
    run = client.get_run(str(found.run_id))
    status = run.data.tags.get(f"hpsearch.export.{fmt}")
    if status != "ok":
        why = status or "it was registered before exports existed; run `search retrain` for a new version"
        raise SearchError(f"{model_name} version {found.version} has no {fmt} export: {why}")
    with tempfile.TemporaryDirectory(prefix="hpsearch-export-") as tmp:
        local = client.download_artifacts(str(found.run_id), f"{ARTIFACT_DIR}/{FORMATS[fmt]}", tmp)
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, output)
    return str(found.version), output


def _export_onnx(module: Any, rows: Any, path: Path) -> None:
    import torch

    batch = torch.export.Dim("batch", min=1)
    # torch sets its exporter's log level when it is imported; its notes (torchvision ops it skips)
    # are for debugging only.
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    if not log.isEnabledFor(logging.DEBUG):
        exporter_log.setLevel(logging.ERROR)
    try:
        with torch.no_grad():
            program = torch.onnx.export(
                module, (rows[:2],), dynamic_shapes=({0: batch},), input_names=["input"], output_names=["output"],
                dynamo=True, verbose=False,
            )  # fmt: skip
    finally:
        exporter_log.setLevel(level)
    if program is None:  # only the legacy exporter writes the file itself
        raise SearchError("torch.onnx.export returned no program")
    program.save(str(path))


def _export_torchscript(module: Any, rows: Any, path: Path) -> None:
    import warnings

    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a trace that differs on check_inputs raises as well
        scripted = torch.jit.trace(module, (rows[:2],), check_inputs=[(rows[:3],)])
    scripted.save(str(path))


_EXPORTERS = {"onnx": _export_onnx, "torchscript": _export_torchscript}


def _torch_out(module: Any, rows: Any) -> Any:
    import torch

    with torch.no_grad():
        return module(rows).float().numpy()


def _max_diff(module: Any, rows: Any, fmt: str, path: Path) -> float:
    """Largest |exported - PyTorch| over the rows, run at two batch sizes."""
    import numpy as np

    reference = _torch_out(module, rows)
    if fmt == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        got = np.concatenate([session.run(None, {name: part.numpy()})[0] for part in (rows[:1], rows[1:])])
    else:
        import torch

        loaded = torch.jit.load(str(path))
        with torch.no_grad():
            got = np.concatenate([loaded(part).float().numpy() for part in (rows[:1], rows[1:])])
    return float(np.max(np.abs(got.astype(np.float64) - reference.astype(np.float64))))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]
