"""Samplers and pruners by spec (``name`` or ``name:key=value,...``), so every worker rebuilds the same ones.

Every option a spec may carry is declared here, with its type and default: a spec is checked in
full before a study is created (an unknown option or a bad value is one line), and the options a
spec names are the ones the built object gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError

if TYPE_CHECKING:
    from optuna.pruners import BasePruner
    from optuna.samplers import BaseSampler


@dataclass(frozen=True)
class Option:
    kind: type
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    auto: bool = False
    """Also accepts ``auto`` (a pruner's: picked from the study's own finished trials; TPE's
    ``multivariate``: picked for each trial from how many others run)."""


_STARTUP = Option(int, 10, "trials sampled at random before the model is used")
# The adaptive first rung's options, the same for the median rule and successive halving.
_RHO = Option(float, 0.8, "with auto: rank correlation with the final values that makes an epoch rank")
_CONF = Option(float, 0.5, "with auto: confidence that the correlation reaches rho (0.5: as measured)")
SAMPLER_OPTIONS: dict[str, dict[str, Option]] = {
    "tpe": {
        "startup": _STARTUP,
        "multivariate": Option(
            bool,
            "auto",
            "model the parameters jointly; auto: jointly while no other trial "
            "runs, per parameter while others do (each better there in the benchmark)",
            auto=True,
        ),  # fmt: skip
        "group": Option(bool, False, "split conditional spaces into groups (multivariate only)"),
        "liar": Option(bool, True, "constant liar: running trials count as bad, so parallel workers spread out"),
        "candidates": Option(int, 24, "candidates scored per suggestion"),
    },
    "gp": {"startup": _STARTUP},
    "random": {},
    "qmc": {
        "type": Option(str, "sobol", "low-discrepancy sequence", ("sobol", "halton")),
        "scramble": Option(bool, True, "randomise the sequence (with --seed)"),
    },
    "cmaes": {
        "startup": Option(int, 1, "trials sampled at random before CMA-ES starts"),
        "sigma": Option(float, 0.0, "initial step size; 0: a sixth of each range"),
    },
}
PRUNER_OPTIONS: dict[str, dict[str, Option]] = {
    "hyperband": {
        "min": Option(int, 1, "epochs of the first rung"),
        "factor": Option(int, 3, "reduction factor: keep the top 1/factor at each rung"),
    },
    "successive-halving": {
        "min": Option(int, 1, "epochs of the first rung; auto: the first epoch that ranks trials", auto=True),
        "factor": Option(int, 3, "reduction factor: keep the top 1/factor at each rung"),
        "rate": Option(int, 0, "minimum early-stopping rate: the first rung is at min * factor**rate epochs"),
        "bootstrap": Option(int, 0, "trials a rung needs before it prunes"),
        "startup": Option(int, 10, "with min=auto: complete trials before the first rung is chosen"),
        "rho": _RHO,
        "conf": _CONF,
    },
    "median": {
        "startup": Option(int, 5, "complete trials before anything is pruned"),
        "warmup": Option(int, 1, "epochs a trial runs before it can be pruned; auto: the first that ranks", auto=True),
        "interval": Option(int, 1, "epochs between pruning checks"),
        "min_trials": Option(int, 1, "trials that must have reported an epoch before it is compared"),
        "rho": _RHO,
        "conf": _CONF,
    },
    "none": {},
}
SAMPLERS = tuple(SAMPLER_OPTIONS)
PRUNERS = tuple(PRUNER_OPTIONS)


def parse_spec(spec: str, kind: str, table: dict[str, dict[str, Option]]) -> tuple[str, dict[str, Any]]:
    """``name`` or ``name:key=value,...`` (e.g. ``median:startup=2,warmup=1``), every option checked.

    Returns the name and all of its options, the ones the spec leaves out at their defaults.
    """
    name, _, rest = spec.partition(":")
    name = name.strip().lower()
    if name not in table:
        raise SearchError(f"unknown {kind} {name!r}; choose one of: {', '.join(table)}")
    declared = table[name]
    options = {key: opt.default for key, opt in declared.items()}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise SearchError(f"bad {kind} option {item!r} in {spec!r}; expected key=value")
        if key not in declared:
            known = ", ".join(declared) or "none"
            raise SearchError(f"unknown option {key!r} for {kind} {name!r} (its options: {known})")
        options[key] = _convert(declared[key], raw.strip(), f"{kind} option {name}:{key}")
    return name, options


def _convert(option: Option, raw: str, what: str) -> Any:
    if option.auto and raw.lower() == "auto":
        return "auto"
    try:
        if option.kind is bool:
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return raw.lower() in ("true", "1", "yes")
        value = option.kind(raw)
    except ValueError:
        raise SearchError(f"bad value {raw!r} for {what}: expected {option.kind.__name__}") from None
    if option.choices and value not in option.choices:
        raise SearchError(f"bad value {raw!r} for {what}: choose one of {', '.join(option.choices)}")
    if option.kind in (int, float) and value < 0:
        raise SearchError(f"bad value {raw!r} for {what}: must be >= 0")
    return value


def make_sampler(spec: str, seed: int | None) -> BaseSampler:
    import optuna

    name, opts = parse_spec(spec, "sampler", SAMPLER_OPTIONS)
    if name == "tpe":

        def tpe(multivariate: bool) -> optuna.samplers.TPESampler:
            return optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=opts["startup"], multivariate=multivariate,
                group=opts["group"] and multivariate, constant_liar=opts["liar"], n_ei_candidates=opts["candidates"],
            )  # fmt: skip

        if opts["multivariate"] == "auto":
            from search.settings._samplers import ByConcurrency

            return ByConcurrency(alone=tpe(True), together=tpe(False))
        return tpe(opts["multivariate"])
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=opts["startup"])
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed, qmc_type=opts["type"], scramble=opts["scramble"])
    return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=opts["startup"], sigma0=opts["sigma"] or None)


def make_pruner(spec: str, max_epochs: int) -> BasePruner:
    from search.settings import _pruners

    name, opts = parse_spec(spec, "pruner", PRUNER_OPTIONS)
    if name in ("hyperband", "successive-halving") and opts["factor"] < 2:
        raise SearchError(f"bad pruner {spec!r}: factor must be >= 2")
    if opts.get("rho", 0) > 1:
        raise SearchError(f"bad pruner {spec!r}: rho is a rank correlation, at most 1")
    if not 0 <= opts.get("conf", 0.5) < 1:
        raise SearchError(f"bad pruner {spec!r}: conf is a probability below 1")
    if name == "successive-halving" and opts["min"] == "auto":
        return _pruners.AdaptiveSuccessiveHalving(
            opts["factor"], opts["bootstrap"], max(3, opts["startup"]), opts["rho"], opts["conf"]
        )
    if name == "median" and opts["warmup"] == "auto":
        return _pruners.AdaptiveMedian(
            opts["startup"], opts["rho"], max(1, opts["interval"]), max(1, opts["min_trials"]), opts["conf"]
        )
    if name in ("hyperband", "successive-halving") and opts["min"] < 1:
        raise SearchError(f"bad pruner {spec!r}: min must be >= 1 epoch")
    if name == "hyperband":
        if opts["min"] > max_epochs:
            raise SearchError(f"bad pruner {spec!r}: min is above the study's {max_epochs} search epochs")
        return _pruners.RetryAwareHyperband(opts["min"], max_epochs, opts["factor"])
    if name == "successive-halving":
        return _pruners.RetryAwareSuccessiveHalving(opts["min"], opts["factor"], opts["rate"], opts["bootstrap"])
    if name == "median":
        import optuna

        if opts["interval"] < 1 or opts["min_trials"] < 1:
            raise SearchError(f"bad pruner {spec!r}: interval and min_trials must be >= 1")
        return optuna.pruners.MedianPruner(
            n_startup_trials=opts["startup"], n_warmup_steps=opts["warmup"], interval_steps=opts["interval"],
            n_min_trials=opts["min_trials"],
        )  # fmt: skip
    import optuna

    return optuna.pruners.NopPruner()


def validate(sampler: str, pruner: str, max_epochs: int | None = None) -> None:
    """Check both specs in full before a study is created; with ``max_epochs``, also against the study."""
    parse_spec(sampler, "sampler", SAMPLER_OPTIONS)
    parse_spec(pruner, "pruner", PRUNER_OPTIONS)
    if max_epochs is not None:
        make_pruner(pruner, max_epochs)


def describe_options(table: dict[str, dict[str, Option]]) -> str:
    """One line per algorithm and its options, for ``--help`` and the docs."""
    lines = []
    for name, options in table.items():
        opts = ", ".join(f"{key}={opt.default}" for key, opt in options.items())
        lines.append(f"{name}" + (f" [{opts}]" if opts else ""))
    return "; ".join(lines)


def describe(sampler: str, pruner: str) -> str:
    """What a strategy does, in words, for the start of a search (``--sampler``/``--pruner`` specs)."""
    s_name, s = parse_spec(sampler, "sampler", SAMPLER_OPTIONS)
    p_name, p = parse_spec(pruner, "pruner", PRUNER_OPTIONS)
    models = {"auto": "joint model alone, per-parameter beside running trials", True: "joint model"}
    model = models.get(s.get("multivariate"), "per-parameter model")
    words = {"tpe": f"TPE ({model}"
                    f"{', constant liar' if s.get('liar') else ''}, {s.get('startup')} random trials first)",
             "gp": f"Gaussian process ({s.get('startup')} random trials first)", "random": "random search",
             "qmc": f"quasi-random {s.get('type')}", "cmaes": "CMA-ES"}[s_name]  # fmt: skip
    if p_name == "median":
        sure = f" at {p['conf']:.0%} confidence" if p["conf"] > 0.5 else ""
        start = (f"the first epoch that ranks the complete trials (Spearman >= {p['rho']:g}{sure})"
                 if p["warmup"] == "auto" else f"epoch {p['warmup']}")  # fmt: skip
        rule = f"median rule from {start}, after {p['startup']} complete trials"
    elif p_name == "successive-halving":
        first = "the first epoch that ranks trials" if p["min"] == "auto" else f"epoch {p['min']}"
        rule = f"successive halving (keep 1/{p['factor']}) from {first}"
    elif p_name == "hyperband":
        rule = f"Hyperband (keep 1/{p['factor']}, first rung at epoch {p['min']} in the most aggressive bracket)"
    else:
        rule = "no pruning"
    return f"{words}; {rule}"
