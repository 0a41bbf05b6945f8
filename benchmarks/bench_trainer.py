"""Training throughput of ``trainer.fit`` against a plain PyTorch loop, in one process.

The baseline is the loop tutorials write: a shuffling DataLoader over a TensorDataset, AdamW,
``loss.item()`` each step for the running loss, autocast (and a GradScaler in fp16) for mixed
precision. Both train the same residual MLP (128 -> width x 4 blocks -> 10, width 256 by default)
on the same random rows for the same epochs (batch 64 by default). Runs are interleaved (the order
flips every repeat) so drifting machine load hits both alike. Each call is timed whole, so the
trainer's set-up and its (one-batch) validation count against it. Throughput is given per wall
second and per CPU second of this process; on a shared machine the CPU figure is the steadier one,
since it does not count time the process spent waiting for a core. Besides the ratio of the medians,
the median of the per-repeat ratios is printed (each repeat's runs ran back to back, so it is the
steadier comparison when the machine's speed drifts between repeats).

    python benchmarks/bench_trainer.py --device cpu --epochs 3 --repeats 5 [--compile]
    python benchmarks/bench_trainer.py --device cuda --mixed-precision bf16 --batch 1024 --width 2048

At batch 64 this model is a few microseconds of GPU work per kernel, so on a GPU the default shape
measures the per-step cost on the host (kernel launches, Python); a large ``--batch``/``--width``
measures the GPU's arithmetic (the trainer's model TFLOP/s and MFU are printed at the end).

``--compile`` adds a third runner, ``trainer.fit`` with ``Infra(compile=True)``; its warm-up
call pays the compilation, which the timed calls (new models of the same shapes) then reuse.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

import trainer

LR = 1e-3


class Block(nn.Module):
    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU(), nn.Dropout(dropout))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


def residual_mlp(seed: int, width: int) -> nn.Module:
    torch.manual_seed(seed)
    blocks = [Block(width, 0.1) for _ in range(4)]
    return nn.Sequential(nn.Linear(128, width), *blocks, nn.Linear(width, 10))


def baseline(model: nn.Module, x: Tensor, y: Tensor, args: argparse.Namespace) -> int:
    """The tutorial loop; returns the number of samples trained."""
    device = torch.device(args.device)
    model.to(device).train()
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.mixed_precision)
    autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    scaler = torch.amp.GradScaler(device.type, enabled=args.mixed_precision == "fp16")
    seen, running_loss = 0, 0.0
    for _ in range(args.epochs):
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            with autocast:
                loss = F.cross_entropy(model(xb), yb)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            running_loss += loss.item()
            seen += len(yb)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return seen


LAST_EPOCH: dict[str, float] = {}
"""The last epoch's metrics of the last ``trainer.fit`` call (model TFLOP/s, MFU, peak memory)."""


def with_trainer(model: nn.Module, x: Tensor, y: Tensor, args: argparse.Namespace, compile: bool = False) -> int:
    """``trainer.fit``; returns the number of samples trained (every row, every epoch)."""
    config = trainer.TrainConfig(epochs=args.epochs, batch_size=args.batch, lr=LR, mixed_precision=args.mixed_precision)
    infra = trainer.Infra(compile=compile, cpu=args.device == "cpu")
    val = trainer.TensorData(x[: args.batch], y[: args.batch])  # one batch: validation is timed here too
    result = trainer.fit(model, trainer.TensorData(x, y), val, trainer.Classification(10), config, infra=infra)
    LAST_EPOCH.clear()
    LAST_EPOCH.update(result.history[-1])
    return args.epochs * len(x)


Runner = Callable[[nn.Module, Tensor, Tensor, argparse.Namespace], int]


def timed(run: Runner, x: Tensor, y: Tensor, args: argparse.Namespace, seed: int) -> tuple[float, float]:
    """(samples per wall second, samples per CPU second) of one whole call."""
    model = residual_mlp(seed, args.width)
    wall, cpu = time.perf_counter(), time.process_time()
    samples = run(model, x, y, args)
    return samples / (time.perf_counter() - wall), samples / (time.process_time() - cpu)


def measure(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(args.rows, 128, generator=generator)
    y = torch.randint(0, 10, (args.rows,), generator=generator)
    runners: dict[str, Runner] = {"baseline": baseline, "trainer": with_trainer}
    if args.compile:
        runners["compiled"] = lambda model, x, y, args: with_trainer(model, x, y, args, compile=True)
    warmup, warm_rows = argparse.Namespace(**{**vars(args), "epochs": 1}), max(2000, 2 * args.batch)
    for run in runners.values():  # first-call costs (kernel selection, Accelerate state) are not timed
        run(residual_mlp(0, args.width), x[:warm_rows], y[:warm_rows], warmup)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
    for repeat in range(args.repeats):
        order = list(runners) if repeat % 2 == 0 else list(reversed(runners))
        for name in order:
            results[name].append(timed(runners[name], x, y, args, seed=repeat))
        line = "   ".join(f"{n} {results[n][-1][0]:7.0f} ({results[n][-1][1]:7.0f} cpu)" for n in runners)
        print(f"repeat {repeat + 1}: {line}  samples/s", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--mixed-precision", choices=["no", "bf16", "fp16"], default="no")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=256, help="the residual blocks' width")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--compile", action="store_true", help="also time trainer.fit with torch.compile")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available")
    if args.mixed_precision == "fp16" and args.device != "cuda":
        parser.error("--mixed-precision fp16 needs --device cuda")
    if min(args.batch, args.width, args.epochs, args.repeats) < 1 or args.rows < args.batch:
        parser.error("--batch, --width, --epochs and --repeats must be >= 1, and --rows at least --batch")
    print(
        f"device={args.device} mixed_precision={args.mixed_precision} epochs={args.epochs} "
        f"repeats={args.repeats} rows={args.rows} batch={args.batch} width={args.width} "
        f"torch_threads={torch.get_num_threads()}"
    )
    results = measure(args)
    for clock, column in (("wall", 0), ("cpu", 1)):
        base = statistics.median(r[column] for r in results["baseline"])
        for name in [n for n in results if n != "baseline"]:
            ours = statistics.median(r[column] for r in results[name])
            paired = statistics.median(
                r[column] / b[column] for r, b in zip(results[name], results["baseline"], strict=True)
            )
            print(
                f"{clock:>4} clock, median: baseline {base:7.0f} samples/s   {name} {ours:7.0f} samples/s   "
                f"ratio {name}/baseline {ours / base:.2f}x (median of per-repeat ratios {paired:.2f}x)"
            )
    speed = {k: LAST_EPOCH[k] for k in ("model_tflops", "mfu", "peak_memory_mb") if k in LAST_EPOCH}
    print("trainer, last epoch: " + "   ".join(f"{k} {v:.4g}" for k, v in speed.items()))


if __name__ == "__main__":
    main()
