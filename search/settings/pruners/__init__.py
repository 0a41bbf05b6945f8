"""The pruners a ``--pruner`` spec may name: one module each, one line in ``PRUNERS``."""

from search.settings._spec import PrunerSpec, registry

PRUNERS: dict[str, type[PrunerSpec]] = registry(__name__, (
    "_hyperband:Hyperband",
    "_successive_halving:SuccessiveHalving",
    "_asha:Asha",
    "_pbt:Pbt",
    "_median:Median",
    "_wilcoxon:Wilcoxon",
    "_none:NoPruning",
))  # fmt: skip
"""Name -> its class, in the order ``--help`` lists them."""

__all__ = ["PRUNERS", "PrunerSpec"]
