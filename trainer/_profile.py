"""Profiling a fit: ``torch.profiler`` over a few optimizer steps, as a context manager.

    with trainer.profiled(out_dir, wait=1, warmup=2, active=5) as prof:
        trainer.fit(model, train, val, task, config, on_step=prof.step)
    print(prof.table)          # top operators by self time
    prof.trace                 # Chrome trace (chrome://tracing, Perfetto)

CPU activity always, CUDA when a GPU is in use, memory and shapes recorded. The schedule skips
``wait`` steps, warms up for ``warmup`` and records ``active``; steps after that cost nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOP_OPERATORS = 25


@dataclass
class Profile:
    """What a profiled run left: call :meth:`step` after every optimizer step while it runs."""

    trace: Path
    table: str = ""
    steps: int = 0
    """Optimizer steps the profiler saw (its schedule records only the active ones)."""
    sort_by: str = "self_cpu_time_total"
    _profiler: Any = field(default=None, repr=False)

    def step(self) -> None:
        self.steps += 1
        self._profiler.step()


@contextmanager
def profiled(out_dir: Path, *, wait: int = 1, warmup: int = 2, active: int = 5,
             cuda: bool | None = None) -> Iterator[Profile]:  # fmt: skip
    """Profile what runs inside; on exit, ``out_dir/trace.json`` and the table of top operators."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    use_cuda = torch.cuda.is_available() if cuda is None else cuda
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if use_cuda else [])]
    out_dir.mkdir(parents=True, exist_ok=True)
    result = Profile(out_dir / "trace.json", sort_by="self_cuda_time_total" if use_cuda else "self_cpu_time_total")

    def ready(prof: Any) -> None:
        prof.export_chrome_trace(str(result.trace))

    with profile(activities=activities, schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                 on_trace_ready=ready, record_shapes=True, profile_memory=True) as prof:  # fmt: skip
        result._profiler = prof
        yield result
    if result.steps < wait + warmup + active:
        raise ValueError(f"profiled {result.steps} optimizer steps, the schedule needs {wait + warmup + active}")
    result.table = prof.key_averages().table(sort_by=result.sort_by, row_limit=TOP_OPERATORS)
