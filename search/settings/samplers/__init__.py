"""The samplers a ``--sampler`` spec may name: one module each, one line in ``SAMPLERS``."""

from search.settings._spec import SamplerSpec, registry

SAMPLERS: dict[str, type[SamplerSpec]] = registry(__name__, (
    "_auto:Auto",
    "_tpe:Tpe",
    "_gp:Gp",
    "_nsga2:Nsga2",
    "_random:Random",
    "_qmc:Qmc",
    "_cmaes:CmaEs",
    "_grid:Grid",
))  # fmt: skip
"""Name -> its class, in the order ``--help`` lists them."""

__all__ = ["SAMPLERS", "SamplerSpec"]
