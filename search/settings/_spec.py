"""What a sampler or pruner is to a study: its declared options, how to build it, how to describe it.

One class per sampler (``search/settings/samplers/``) and per pruner (``search/settings/pruners/``),
each in its own module and named in its package's registry. A spec (``name`` or
``name:key=value,...``) is parsed into an instance of that class once, where it enters (the start
options, a stored study's record: :func:`search.settings.parse_pruner`); the instance carries
every option, at the spec's value or its default, and the spec's own text, which is what the study
stores and what errors quote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from search.exceptions import SearchError

if TYPE_CHECKING:
    from collections.abc import Iterable

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


STARTUP = Option(int, 10, "trials sampled at random before the model is used")
# The adaptive first rung's options, the same for the median rule and successive halving.
RHO = Option(float, 0.8, "with auto: rank correlation with the final values that makes an epoch rank")
CONF = Option(float, 0.5, "with auto: confidence that the correlation reaches rho (0.5: as measured)")


@dataclass(frozen=True)
class AlgorithmSpec:
    """A parsed spec: ``values`` holds every declared option (the ones the spec leaves out at their defaults)."""

    kind: ClassVar[str]
    name: ClassVar[str]
    options: ClassVar[dict[str, Option]] = {}
    """Every option a spec may carry, with its type and default (``--help`` and the docs list them)."""

    text: str
    """The spec as given: stored with the study, quoted in errors."""
    values: dict[str, Any]

    @classmethod
    def parse(cls, text: str) -> Any:
        """``name`` or ``name:key=value,...`` (e.g. ``median:startup=2,warmup=1``), every option checked."""
        rest = text.partition(":")[2]
        values = {key: opt.default for key, opt in cls.options.items()}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, sep, raw = item.partition("=")
            key = key.strip().replace("-", "_")
            if not sep:
                raise SearchError(f"bad {cls.kind} option {item!r} in {text!r}; expected key=value")
            if key not in cls.options:
                known = ", ".join(cls.options) or "none"
                raise SearchError(f"unknown option {key!r} for {cls.kind} {cls.name!r} (its options: {known})")
            values[key] = _convert(cls.options[key], raw.strip(), f"{cls.kind} option {cls.name}:{key}")
        return cls(text, values)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def spec(self) -> str:
        """The canonical string a study stores: the spec as it was given."""
        return self.text

    def describe(self) -> str:
        """What it does, in words, for the start of a search."""
        raise NotImplementedError


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
        expected = getattr(option.kind, "what", option.kind.__name__)
        raise SearchError(f"bad value {raw!r} for {what}: expected {expected}") from None
    if option.choices and value not in option.choices:
        raise SearchError(f"bad value {raw!r} for {what}: choose one of {', '.join(option.choices)}")
    if option.kind in (int, float) and value < 0:
        raise SearchError(f"bad value {raw!r} for {what}: must be >= 0")
    return value


@dataclass(frozen=True)
class SamplerSpec(AlgorithmSpec):
    kind: ClassVar[str] = "sampler"
    multi_objective: ClassVar[bool] = True
    """Whether it can search several objectives at once (Optuna's CMA-ES cannot)."""
    uses_constraints: ClassVar[bool] = False
    """Whether it steers away from infeasible trials (reads their ``constraints`` system attributes)."""

    def build(self, seed: int | None) -> BaseSampler:
        raise NotImplementedError


@dataclass(frozen=True)
class PrunerSpec(AlgorithmSpec):
    """A pruner: besides building it, it says where the built pruner can decide and what it reads."""

    kind: ClassVar[str] = "pruner"
    reads_running_trials: ClassVar[bool] = True
    """Whether its pruners read other running trials (their values, their rung records); those that
    do not are handed the running trials as first read (``storage.StudyTrials``)."""
    exploits: ClassVar[bool] = False
    """Whether its "prune" means *replace*: population-based training (``pruners/_pbt.py``)."""
    pauses: ClassVar[bool] = False
    """Whether its "prune" means *pause*: the trial ends as PRUNED with its checkpoint kept, and a
    worker resumes it once :meth:`to_resume` names it (freeze-thaw, ``pruners/_asha.py``)."""

    @classmethod
    def built_types(cls) -> tuple[type, ...]:
        """The classes of the pruners :meth:`build` makes (how a worker finds the spec of its study's pruner)."""
        return ()

    def check(self, search_epochs: int) -> None:
        """Refuse, in one line, options that do not fit together or do not fit the study's epochs."""

    def build(self, search_epochs: int) -> BasePruner:
        raise NotImplementedError

    def check_study(self, study: Any, space: dict[str, Any]) -> None:
        """Refuse, in one line, a study this pruner cannot search (``space``: its recorded search space)."""

    @classmethod
    def may_prune_at(cls, pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
        """Whether ``pruner`` could prune (or record a rung) at ``step`` (``search/settings/_prune_points.py``)."""
        return True

    @classmethod
    def to_resume(cls, pruner: Any, values: Any, paused: Any, maximize: bool, spent: bool = False) -> int | None:
        """For a pruner that pauses: the paused logical trial to resume now, if any, given every
        logical trial's reported values and the paused ones' epochs (logical number -> epoch);
        ``spent``: the budget's trials have all started (no new trial will reach a rung)."""
        return None

    def refuse(self, why: str) -> SearchError:
        return SearchError(f"bad pruner {self.text!r}: {why}")

    def check_factor(self) -> None:
        if self["factor"] < 2:
            raise self.refuse("factor must be >= 2")

    def check_ranking(self) -> None:
        """The adaptive first epoch's options (``rho``, ``conf``)."""
        if self["rho"] > 1:
            raise self.refuse("rho is a rank correlation, at most 1")
        if not 0 <= self["conf"] < 1:
            raise self.refuse("conf is a probability below 1")


def new_rung(first: int, factor: int, step: int, last_asked: int) -> bool:
    """Whether ``step`` reaches a rung (``first``, ``first * factor``, ...) that ``last_asked`` had not."""
    if first < 1 or factor < 2:
        return True
    rung = first
    while rung <= step:
        if rung > last_asked:
            return True
        rung *= factor
    return False


def registry(package: str, entries: tuple[str, ...]) -> dict[str, Any]:
    """``name -> class`` for ``entries`` of ``"_module:Class"`` in ``package``, in their order: one
    line each, so adding a sampler or pruner is its module and one line."""
    from importlib import import_module

    found = {}
    for entry in entries:
        module, _, name = entry.partition(":")
        spec = getattr(import_module(f"{package}.{module}"), name)
        found[spec.name] = spec
    return found
