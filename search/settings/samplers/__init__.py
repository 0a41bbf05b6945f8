"""The samplers a ``--sampler`` spec may name: one module each, one line in ``SAMPLERS``."""

from search.settings._spec import SamplerSpec
from search.settings.samplers._cmaes import CmaEs
from search.settings.samplers._gp import Gp
from search.settings.samplers._qmc import Qmc
from search.settings.samplers._random import Random
from search.settings.samplers._tpe import Tpe

SAMPLERS: dict[str, type[SamplerSpec]] = {
    "tpe": Tpe,
    "gp": Gp,
    "random": Random,
    "qmc": Qmc,
    "cmaes": CmaEs,
}
"""Name -> its class, in the order ``--help`` lists them."""

__all__ = ["SAMPLERS", "CmaEs", "Gp", "Qmc", "Random", "SamplerSpec", "Tpe"]
