"""The pruners a ``--pruner`` spec may name: one module each, one line in ``PRUNERS``."""

from search.settings._spec import PrunerSpec
from search.settings.pruners._hyperband import Hyperband
from search.settings.pruners._median import Median
from search.settings.pruners._none import NoPruning
from search.settings.pruners._successive_halving import SuccessiveHalving

PRUNERS: dict[str, type[PrunerSpec]] = {
    "hyperband": Hyperband,
    "successive-halving": SuccessiveHalving,
    "median": Median,
    "none": NoPruning,
}
"""Name -> its class, in the order ``--help`` lists them."""

__all__ = ["PRUNERS", "Hyperband", "Median", "NoPruning", "PrunerSpec", "SuccessiveHalving"]
