"""Float against int8 for a study's champion: ONNX Runtime's and PyTorch's dynamic quantization, measured alike.

For the registered champion of a finished study (default: resmlp in ./.search), on its test split
(raw rows: every variant includes the preprocessing):

  onnx float32         the exported file (`search export`)
  onnx int8            onnxruntime.quantization.quantize_dynamic, int8 weights per tensor
                       (what `search export --quantize int8` does)
  onnx int8/channel    the same, per output channel
  torch float32        the module rebuilt from the study's code with the champion's weights (from its
                       TorchScript file), saved as TorchScript
  torch int8           torch.ao.quantization.quantize_dynamic on nn.Linear (qint8), traced and saved

Each: file size; latency per sample at batch 1 on one thread (the median of 500 runs after 50
warm-up runs; the median of those over --repeats rounds, the variants alternating within a round);
the study's test metrics; for a classifier, the share of test rows whose predicted class is
the float ONNX file's.

    python benchmarks/bench_quantize.py --project-dir .search --name resmlp --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project-dir", type=Path, default=Path(".search"))
    parser.add_argument("--name", default="resmlp", help="The study [resmlp].")
    parser.add_argument("--repeats", type=int, default=5, help="Latency rounds [5].")
    return parser.parse_args()


def champion_module(coordinator: Any, data: Any, study: Any, torchscript: Path, trial: int) -> Any:
    """The champion as an eager PyTorch module (preprocessing included): the study's own model code
    with the weights of the champion's TorchScript file (same module tree, so the same names)."""
    import optuna
    import torch

    from search.tracking import export_model

    params = next(t.params for t in coordinator.load().trials if t.number == trial)
    module = export_model(study.build_model(study.suggest(optuna.trial.FixedTrial(params)), data), data)
    module.load_state_dict(torch.jit.load(str(torchscript)).state_dict())
    return module.eval()


def torch_variant(module: Any, rows: Any, path: Path) -> tuple[Callable[[Any], Any], int]:
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(module, (torch.from_numpy(rows[:2]),)).save(str(path))

    def run(x: Any) -> Any:
        with torch.inference_mode():
            return module(torch.from_numpy(x)).numpy()

    return run, path.stat().st_size


def onnx_variant(path: Path) -> tuple[Callable[[Any], Any], int]:
    from search.tracking._quantize import onnx_session

    session = onnx_session(path)
    name = session.get_inputs()[0].name
    return (lambda x: session.run(None, {name: x})[0]), path.stat().st_size


def main() -> None:
    import numpy as np
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from search.api._open import open_existing_with_locations
    from search.settings import load_study
    from search.tracking import Tracker, download_portable, read_champion
    from search.tracking._quantize import batch1_latency_ms, quantize_onnx, raw_test_rows, score

    args = parse_args()
    torch.set_num_threads(1)
    where = dict.fromkeys(("storage", "tracking_uri", "artifact_location", "checkpoint_dir", "tensorboard"))
    coordinator, loc = open_existing_with_locations({"name": args.name, "project_dir": args.project_dir, **where})
    tracker = Tracker(loc.tracking())
    champion = read_champion(tracker, args.name)
    if champion is None or champion.source_trial is None:
        raise SystemExit(f"study {args.name} has no champion")
    record = coordinator.read_record()
    study = load_study(record.study_ref, record.options, record.narrow)
    data = study.load_data()
    rows, targets = raw_test_rows(data)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        download_portable(tracker, args.name, champion.version, "onnx", out / "float.onnx")
        download_portable(tracker, args.name, champion.version, "torchscript", out / "champion.pt")
        quantize_onnx(out / "float.onnx", out / "int8.onnx")
        quantize_dynamic(out / "float.onnx", out / "int8-channel.onnx", per_channel=True, weight_type=QuantType.QInt8)
        module = champion_module(coordinator, data, study, out / "champion.pt", champion.source_trial)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation
            quantized = torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)
        variants = {
            "onnx float32": onnx_variant(out / "float.onnx"),
            "onnx int8": onnx_variant(out / "int8.onnx"),
            "onnx int8/channel": onnx_variant(out / "int8-channel.onnx"),
            "torch float32": torch_variant(module, rows, out / "float.pt"),
            "torch int8": torch_variant(quantized, rows, out / "int8.pt"),
        }
        outputs = {name: np.asarray(run(rows)) for name, (run, _) in variants.items()}
        metrics = {name: score(out, targets, data.task) for name, out in outputs.items()}
        reference = outputs["onnx float32"].argmax(-1)
        agree = {name: float((out.argmax(-1) == reference).mean()) for name, out in outputs.items()}
        latencies: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, (run, _) in variants.items():
                latencies[name].append(batch1_latency_ms(run, rows))
    params = next(t.params for t in coordinator.load().trials if t.number == champion.source_trial)
    print(f"study {args.name}, champion version {champion.version} (trial {champion.source_trial}: "
          f"width {params.get('width')}, depth {params.get('depth')}), "
          f"{len(rows)} test rows, registered {record.metric.replace('val_', 'test_')} "
          f"{champion.test_metrics.get(record.metric.replace('val_', 'test_'), float('nan')):.4f}")  # fmt: skip
    names = sorted(next(iter(metrics.values())))
    print(f"| variant | size (bytes) | latency/sample, batch 1 (us) | {' | '.join(names)} | same class as float |")
    print("|---|---:|---:|" + "---:|" * (len(names) + 1))
    for name, (_, size) in variants.items():
        lat = statistics.median(latencies[name]) * 1000
        spread = f"{min(latencies[name]) * 1000:.1f}-{max(latencies[name]) * 1000:.1f}"
        cells = " | ".join(f"{metrics[name][n]:.4f}" for n in names)
        print(f"| {name} | {size:,} | {lat:.1f} ({spread}) | {cells} | {agree[name]:.4f} |")


if __name__ == "__main__":
    main()
