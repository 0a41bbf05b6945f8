"""The resmlp study with a fixed architecture and batch: every epoch costs the same, whatever is sampled.

For measuring throughput (epochs per second) across worker and thread configurations: resmlp's own
space varies width, depth, batch size and accumulation, so an epoch's cost depends on what the
sampler picked, and the sampler picks differently beside running trials; a comparison of epochs per
second between configurations would then compare the trials picked. Here only the learning rate,
weight decay, dropout and warm-up are searched. Options: resmlp's, plus ``width`` (128), ``depth``
(2) and ``batch_size`` (64).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from studies._base import resolve_precision
from studies.resmlp import ResMLPParams, ResMLPStudy
from studies.resmlp import make_study as make_resmlp


@dataclass(frozen=True)
class FixedCostStudy(ResMLPStudy):
    width: int = 128
    depth: int = 2
    batch_size: int = 64
    name: str = "fixed-cost"

    def suggest(self, trial: Any) -> ResMLPParams:
        return ResMLPParams(
            lr=trial.suggest_float("lr", 1e-4, 1e-2, log=True),
            weight_decay=trial.suggest_float("weight_decay", 1e-6, 1e-1, log=True),
            width=self.width,
            depth=self.depth,
            dropout=trial.suggest_float("dropout", 0.0, 0.5),
            batch_size=self.batch_size,
            warmup_fraction=trial.suggest_float("warmup_fraction", 0.0, 0.2),
            grad_accum_steps=1,
            mixed_precision=resolve_precision(self.precision),
        )


def make_study(width: int = 128, depth: int = 2, batch_size: int = 64, **options: Any) -> FixedCostStudy:
    base = make_resmlp(**options)
    fields = {name: getattr(base, name) for name in base.__dataclass_fields__ if name != "name"}
    return FixedCostStudy(**fields, width=int(width), depth=int(depth), batch_size=int(batch_size))
