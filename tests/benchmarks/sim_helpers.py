"""A toy study for the search simulator: one parameter ``x`` in [0, 1] and four epochs; a subclass
gives the learning curve (``curve(params)``, a ``benchmarks.search_sim.Curve``)."""

from __future__ import annotations

from optuna.distributions import FloatDistribution


class ToyProblem:
    name = "toy"
    epochs = 4

    def space(self):
        return {"x": FloatDistribution(0.0, 1.0)}
