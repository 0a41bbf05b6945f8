"""How fast a fit trains: model FLOPs, their utilisation of the device's peak, memory, tokens.

Model FLOPs are counted once per ``fit`` on its first training micro-batch, as it runs, with
``torch.utils.flop_counter`` (forward and backward; the optimizer's update is not counted, as in
the usual MFU definition). A micro-batch's FLOPs divided by its rows give FLOPs per row; an epoch's
``model_tflops`` is that times the rows trained over the training time, and ``mfu`` the same over
the peak of the devices training, for the dtype the matmuls run in.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils.flop_counter import FlopCounterMode

# Dense peak TFLOP/s per GPU from the vendors' data sheets: (bf16/fp16, tf32, fp32). Matched on
# torch.cuda.get_device_name() by the first name contained in it, so longer names come first.
_PEAK_TFLOPS: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("H100 PCIe", (756.0, 378.0, 51.0)),
    ("H100", (989.4, 494.7, 66.9)),  # SXM
    ("H200", (989.4, 494.7, 66.9)),
    ("A100", (312.0, 156.0, 19.5)),
    ("L40S", (362.0, 183.0, 91.6)),
    ("L40", (181.0, 90.5, 90.5)),
    ("L4", (121.0, 60.0, 30.3)),
)


def peak_tflops(device: torch.device, mixed_precision: str, tf32: bool) -> float | None:
    """The device's dense peak for the dtype its matmuls run in; ``None`` when not known (CPUs and
    GPUs not in the table)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, (half, tf32_peak, fp32) in _PEAK_TFLOPS:
        if key in name:
            if mixed_precision in ("bf16", "fp16"):
                return half
            return tf32_peak if tf32 else fp32
    return None


class FlopCount:
    """Model FLOPs per row, counted on one micro-batch."""

    def __init__(self) -> None:
        self.per_row: float | None = None
        self.pending = True

    @contextmanager
    def counting(self, rows: int) -> Iterator[None]:
        """Count the forward and backward run inside, of a micro-batch of ``rows`` rows."""
        with FlopCounterMode(display=False) as mode:
            yield
        self.per_row, self.pending = mode.get_total_flops() / rows, False

    def skip(self) -> None:
        """Count nothing: the run reports no model FLOPs."""
        self.pending = False


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float | None:
    """The most memory tensors held on ``device`` since the last reset, in MiB (CUDA only)."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20


_STATUS, _CLEAR_REFS = "/proc/self/status", "/proc/self/clear_refs"


def reset_peak_rss() -> bool:
    """Restart the process's peak resident memory from its current size (Linux: ``5`` written to
    ``/proc/self/clear_refs``); whether it could."""
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def peak_rss_mb() -> float | None:
    """The process's peak resident memory in MiB (``VmHWM``) since it started or was last reset;
    ``None`` where ``/proc`` does not say."""
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
