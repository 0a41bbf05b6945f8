"""Samplers and pruners by name, so every worker rebuilds the same ones from the study's record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError

if TYPE_CHECKING:
    from optuna.pruners import BasePruner
    from optuna.samplers import BaseSampler

SAMPLERS = ("tpe", "random", "qmc", "cmaes")
PRUNERS = ("hyperband", "median", "successive-halving", "none")


def parse_spec(spec: str, kind: str, choices: tuple[str, ...]) -> tuple[str, dict[str, float]]:
    """``name`` or ``name:key=value,key=value`` (e.g. ``median:startup=2,warmup=1``)."""
    name, _, rest = spec.partition(":")
    name = name.strip().lower()
    if name not in choices:
        raise SearchError(f"unknown {kind} {name!r}; choose one of: {', '.join(choices)}")
    options: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            options[key.strip()] = float(value)
        except ValueError:
            raise SearchError(f"bad {kind} option {item!r}; expected key=number") from None
    return name, options


def make_sampler(spec: str, seed: int | None) -> BaseSampler:
    import optuna

    name, opts = parse_spec(spec, "sampler", SAMPLERS)
    startup = int(opts.get("startup", 10))
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed)
    return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=startup)


def make_pruner(spec: str, max_epochs: int) -> BasePruner:
    import optuna

    name, opts = parse_spec(spec, "pruner", PRUNERS)
    known = {"startup", "warmup", "min", "factor"}
    unknown = set(opts) - known
    if unknown:
        raise SearchError(f"unknown pruner option(s) {sorted(unknown)}; known: {sorted(known)}")
    min_resource = int(opts.get("min", 1))
    factor = int(opts.get("factor", 3))
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=min_resource, max_resource=max_epochs, reduction_factor=factor
        )
    if name == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=int(opts.get("startup", 5)), n_warmup_steps=int(opts.get("warmup", 1))
        )
    if name == "successive-halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=min_resource, reduction_factor=factor)
    return optuna.pruners.NopPruner()


def validate(sampler: str, pruner: str) -> dict[str, Any]:
    """Check both specs without building anything (used before a study is created)."""
    parse_spec(sampler, "sampler", SAMPLERS)
    make_pruner(pruner, max_epochs=2)
    return {"sampler": sampler, "pruner": pruner}
