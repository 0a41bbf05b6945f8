"""Grid search: every point of the study's grid once (``--grid``; ``search/settings/_grid.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.settings._spec import SamplerSpec

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler


class Grid(SamplerSpec):
    name = "grid"

    def build(self, seed: int | None) -> BaseSampler:
        # The points are queued as the study's trials when it is created, and a claim pops one
        # under the study lock: Optuna's GridSampler, which picks an unvisited point in each worker,
        # lets racing workers pick the same one.
        from search.settings._samplers import QueuedOnly

        return QueuedOnly()

    def describe(self) -> str:
        return "grid search (each point queued once, in an order fixed by --seed)"
