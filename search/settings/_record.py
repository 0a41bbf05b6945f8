"""A study's stored settings: how it searches and how its workers keep it alive."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from search.exceptions import SearchError
from search.settings._objectives import Constraint, Objective, constraints_of, objectives_of

FIRST_RUNG_ATTR = "hpsearch.first_rung"
"""Study system attribute: the first rung an adaptive pruner chose, and the evidence for it."""


@dataclass(frozen=True)
class SearchSettings:
    """How a study searches and survives dead workers; chosen at ``search start``, stored with the study."""

    sampler: str = "auto"
    """Sampler spec, e.g. ``tpe`` or ``tpe:startup=5`` (see :mod:`search.settings._algorithms`);
    ``auto`` is resolved as a study is created, by its workers (``samplers/_auto.py``).
    The defaults come from ``benchmarks/bench_search.py`` (docs/search-strategy.md)."""
    pruner: str = "median:warmup=auto"
    """Pruner spec, e.g. ``median:warmup=2``; the default prunes from the first epoch whose values
    rank the study's complete trials as their final values do."""
    seed: int = 0
    """Sampler and data-split seed."""
    max_retries: int = 2
    """How often a trial whose worker died is retried."""
    heartbeat_interval: int = 10
    """Seconds between a running trial's heartbeats."""
    grace_period: int = 60
    """Seconds without a heartbeat before a trial counts as dead."""
    stall_timeout: int = 1800
    """Seconds a running trial may go without finishing a training step or a validation batch (from
    its start, so a data loader that hangs before the first step counts) before its worker fails it
    as stalled, queues its retry and exits (``search.execution._watchdog``); 0: never."""
    checkpoint_every: int = 30
    """Seconds of training a killed trial may lose (one epoch, if epochs are longer): a trial is
    checkpointed when its next epoch would end more than this after its last checkpoint, not after
    every epoch (``trainer.Infra.checkpoint_every``); 0: after every epoch."""
    patience: str = "auto"
    """A trial ends, complete, once its metric has not improved for this many epochs: ``N``,
    ``auto`` (a fifth of the study's search epochs, at least 2: :func:`resolve_patience`) or ``off``.
    The default comes from ``benchmarks/bench_search.py`` (docs/search-strategy.md)."""
    select: str = "first"
    """Which trial is the champion (``--select``): ``first``, the best first objective among feasible
    trials, or ``knee``, the Pareto front's point nearest the utopia point (``search/settings/_selection.py``)."""
    latency_batch: int = 64
    """Rows of the batch at which every complete trial's inference latency per sample is measured
    (``latency_ms_batch``, beside ``latency_ms`` at batch 1): one batch for the whole study, so trials
    compare whatever batch size each trained with."""


def parse_patience(value: object) -> str:
    """``--patience``: a positive whole number of epochs, ``auto`` or ``off``, then optionally
    ``:spare=F`` (0 < F <= 1; see :func:`patience_spare`), as it is stored."""
    text = str(value).strip().lower()
    base, colon, option = text.partition(":")
    spare = _spare(option, value) if colon else None
    if base in ("auto", "off"):
        if base == "off" and spare is not None:
            raise SearchError(f"--patience off spares nothing: drop ':spare=', got {value!r}")
        return text if spare is None else f"{base}:spare={spare:g}"
    epochs = _positive_whole(base)
    if epochs is None:
        raise SearchError(f"--patience must be a positive whole number of epochs, auto or off, "
                          f"optionally with :spare=F, got {value!r}")  # fmt: skip
    return str(epochs) if spare is None else f"{epochs}:spare={spare:g}"


def _spare(option: str, value: object) -> float:
    key, _, number = option.partition("=")
    try:
        spare = float(number) if key.strip() == "spare" else math.nan
    except ValueError:
        spare = math.nan
    if not 0 < spare <= 1:
        raise SearchError(f"--patience's option is spare=F with 0 < F <= 1, got {value!r}")
    return spare


def resolve_patience(spec: str, search_epochs: int) -> int:
    """The epochs without improvement after which a trial ends (0: never) for a stored ``patience``."""
    spec = parse_patience(spec).partition(":")[0]
    if spec == "off":
        return 0
    if spec == "auto":
        return max(2, round(search_epochs / 5))
    return int(spec)


def patience_spare(spec: str) -> float:
    """The top fraction of the complete trials a stalled trial must be outside for ``--patience`` to
    end it (``:spare=F``; 0: every stalled trial ends). A flat trial in contention for the best
    model runs on, to its last epoch (where a decaying learning rate often still improves it); the
    compute is saved on flat trials that no longer compete."""
    _, colon, option = parse_patience(spec).partition(":")
    return float(option.partition("=")[2]) if colon else 0.0


def epochs_since_best(values: Mapping[int, float], epoch: int, maximize: bool = False) -> int:
    """Epochs from the best of ``values`` up to ``epoch`` (its first epoch, on a tie) to ``epoch``:
    the count ``--patience`` compares (the worker's pruning hook and the benchmarks' simulator)."""
    seen = [(step, -v if maximize else v) for step, v in values.items() if step <= epoch and not math.isnan(v)]
    if not seen:
        return 0
    best = min(seen, key=lambda sv: (sv[1], sv[0]))[0]
    return epoch - best


def parse_duration(value: object, flag: str = "--timeout") -> float:
    """A positive duration in seconds from ``90``, ``90s``, ``30m``, ``2h`` or ``1.5d``."""
    import re

    found = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([smhd]?)", str(value).strip().lower())
    seconds = float(found[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[found[2]] if found else 0.0
    if seconds <= 0 or isinstance(value, bool):
        raise SearchError(f"{flag} must be a positive duration such as 90s, 30m, 2h or 1.5d, got {value!r}")
    return seconds


def parse_epoch_budget(value: object, search_epochs: int | None = None) -> int:
    """``--epoch-budget``: ``800`` (epochs in all) or ``40x`` (40 times the study's ``search_epochs``,
    the epochs of 40 trials that each train to their last search epoch). Without ``search_epochs``,
    ``Nx`` is checked and N returned."""
    text = str(value).strip().lower()
    times = text.endswith("x")
    number = None if isinstance(value, bool) else _positive_whole(text[:-1] if times else text)
    if number is None:
        raise SearchError(f"--epoch-budget must be a positive whole number of epochs, or Nx for the search epochs "
                          f"of N trials (40x), got {value!r}")  # fmt: skip
    return number * search_epochs if times and search_epochs is not None else number


def parse_stall_timeout(value: object) -> int | None:
    """``--stall-timeout``: a positive whole number of seconds, or ``off`` (0); None stays None."""
    if value is None:
        return None
    if str(value).strip().lower() == "off":
        return 0
    seconds = _positive_whole(value)
    if seconds is None:
        raise SearchError(f"--stall-timeout must be a positive whole number of seconds or off, got {value!r}")
    return seconds


def _positive_whole(value: object) -> int | None:
    """``value`` as a positive whole number (a flag's, so never a bool), or None."""
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return None if number <= 0 or isinstance(value, bool) else number


@dataclass(frozen=True)
class StudyRecord:
    """What every worker needs to rebuild the study's objects; stored on the Optuna study."""

    study_ref: str
    """Built-in study name or absolute path of a study file."""
    metric: str
    direction: str
    search_epochs: int
    settings: SearchSettings = field(default_factory=SearchSettings)
    options: dict[str, Any] = field(default_factory=dict)
    """The study's ``make_study`` options (``--study-option``)."""
    space: dict[str, str] = field(default_factory=dict)
    """The search space, as Optuna distribution JSON per parameter (narrowed, when ``narrow`` is set)."""
    narrow: dict[str, list[float]] = field(default_factory=dict)
    """Numeric parameters searched in a narrower range than the study declares (``--narrow``)."""
    grid: dict[str, list[Any]] = field(default_factory=dict)
    """With ``--sampler grid``: every parameter's values, in the space's order (``search/settings/_grid.py``)."""
    objectives: list[list[str]] = field(default_factory=list)
    """``--objective``s as ``[metric, direction]``; empty: ``metric`` in ``direction``, the study's own."""
    constraints: list[str] = field(default_factory=list)
    """``--constraint``s as labels (``latency_ms<=2``); see ``search/settings/_objectives.py``."""
    folds: int = 0
    """K-fold cross-validation: the folds of the study's data (``StudyData.folds``, e.g. resmlp's
    ``folds`` option), a trial's K fits of ``search_epochs`` each; 0 for one validation split."""

    def goals(self) -> list[Objective]:
        """The study's objectives, in order (its trials' values)."""
        return objectives_of(self.objectives, self.metric, self.direction)

    def limits(self) -> list[Constraint]:
        return constraints_of(self.constraints)

    def maximize(self) -> list[bool]:
        return [o.maximize for o in self.goals()]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StudyRecord:
        data = json.loads(text)
        # Studies stored before the settings were nested keep them at the top level.
        names = {f.name for f in fields(SearchSettings)}
        flat = {k: data.pop(k) for k in list(data) if k in names}
        stored = {**flat, **data.pop("settings", {})}
        stored.setdefault("patience", "off")  # stored before trials could end early: they search as they did
        settings = SearchSettings(**stored)
        return cls(**data, settings=settings)
