"""The Python API: what each ``search`` command does, as a call a notebook or a script can make.

Every function names a study by its name (``--name``, or a built-in study's or study file's own
name) and finds it where the keyword arguments say, exactly as the command's flags would
(``storage``, ``tracking_uri``, ``artifact_location``, ``project_dir``, ``checkpoint_dir``; each
falls back to its ``SEARCH_*`` variable, then to the embedded stores in ``./.search``).
Errors are :class:`search.SearchError` (bad input: fix it) and :class:`search.TemporaryFailure`
(the database or the machine: try again later).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.settings import SearchSettings, parse_duration

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas

    from search.observation import ReportResult, Snapshot
    from search.tracking import Champion, QuantizeReport, RetrainResult


@dataclass(frozen=True)
class SearchOutcome:
    """What :func:`start` left: the exit code the command would give, the study's summary, its champion."""

    study: str
    exit_code: int
    """0: the budget is spent; 1: every trial failed; 130, 143, 129: stopped (the same call resumes)."""
    summary: dict[str, Any]
    """Counts (``finished``, ``complete``, ``pruned``, ``failed``, ``budget``), ``best_trial``,
    ``best_value``, ``best_params`` and the rest of what the command's summary prints."""
    champion: Champion | None


def start(study: str, trials: int | None = None, *, name: str | None = None, workers: int | None = None,
          retrain: bool = True, study_options: dict[str, Any] | None = None,
          narrow: dict[str, tuple[float, float]] | None = None, gpus: str | None = None,
          timeout: float | str | None = None, stop_at: float | None = None, epoch_budget: int | str | None = None,
          grid: dict[str, list[Any]] | None = None,
          quiet: bool = True, objectives: Sequence[str] = (), constraints: Sequence[str] = (),
          warm_start_from: str | None = None, warm_start_top: int = 5,
          **settings_and_where: Any) -> SearchOutcome:  # fmt: skip
    """Create or resume a study, train ``trials`` trials with ``workers`` local worker processes,
    then retrain the best at full scale and register it, as ``search start`` does.

    Settings (``sampler``, ``pruner``, ``seed``, ``max_retries``, ``heartbeat_interval``,
    ``grace_period``, ``stall_timeout``, ``checkpoint_every``, ``patience``, ``select``, ``latency_batch``) are those of
    :class:`search.settings.SearchSettings`; one left out keeps a resumed study's stored value.
    ``timeout`` (seconds, or ``"30m"``) and ``stop_at`` (a best value) end the search early: no new
    trial after them, as ``--timeout`` and ``--stop-at``; so does ``epoch_budget`` (epochs, or ``"40x"``),
    as ``--epoch-budget``, once the trials have trained that many epochs. With ``sampler="grid"``, ``grid`` gives
    parameters' values (``--grid``) and ``trials`` defaults to the grid's size. ``objectives``
    (``["val_loss:min", "val_accuracy:max"]``) and ``constraints`` (``["val_f1>=0.5"]``) are
    ``--objective`` and ``--constraint`` (docs/objectives.md); ``select`` is a setting.
    ``warm_start_from`` and ``warm_start_top`` are ``--warm-start-from`` and ``--warm-start-top``. The rest of the
    keywords say where the study lives (see the module's docstring).

    >>> import search
    >>> outcome = search.start("resmlp", trials=4, workers=1, retrain=False, project_dir="/tmp/demo",
    ...                        study_options={"search_epochs": 2})  # doctest: +SKIP
    >>> outcome.summary["finished"], outcome.summary["best_value"]  # doctest: +SKIP
    (4, 0.213...)
    """
    from search.api._open import study_name
    from search.api._options import StartOptions, check_flags, start_workers
    from search.api._start import run_start
    from search.coordination import set_outage_limit
    from search.execution import release_workers

    names = {f.name for f in fields(SearchSettings)}
    given = {k: settings_and_where.pop(k) for k in list(settings_and_where) if k in names}
    outage = settings_and_where.pop("db_outage_limit", None)
    where = _where(**settings_and_where)
    explicit = set(given) | ({"study_options"} if study_options is not None else set()) | (
        {"narrow"} if narrow is not None else set()) | ({"grid"} if grid is not None else set())  # fmt: skip
    opts = StartOptions(study=study, trials=trials, name=name, workers=workers, settings=SearchSettings(**given),
                        study_options=dict(study_options or {}), retrain=retrain, quiet=quiet, gpus=gpus,
                        narrow={k: [float(v) for v in r] for k, r in (narrow or {}).items()},
                        explicit=frozenset(explicit), stop_at=stop_at,
                        epoch_budget=None if epoch_budget is None else str(epoch_budget), grid=dict(grid or {}),
                        objectives=tuple(objectives), constraints=tuple(constraints),
                        warm_start_from=warm_start_from, warm_start_top=warm_start_top,
                        timeout=None if timeout is None else parse_duration(timeout))  # fmt: skip
    check_flags(opts)
    local = start_workers(opts, debug=False)
    try:
        if outage is not None:
            set_outage_limit(float(outage))
    except BaseException:
        release_workers(local.procs, go=None)
        raise
    code = run_start(opts, dict(where), debug=False, local=local)
    coordinator, loc = _open(name or study_name({"study": study}), where)
    return SearchOutcome(coordinator.study_name, code, _summary(coordinator), _champion(coordinator, loc))


def enqueue(name: str, configs: list[dict[str, Any]], **where: Any) -> list[int]:
    """Queue configurations to try first (``search enqueue``): each a dict of parameter values (those
    left out are the sampler's); they are trials of the budget. Returns the queued trials' numbers.

    >>> search.enqueue("resmlp", [{"lr": 1e-3, "depth": 3}], project_dir="/tmp/demo")  # doctest: +SKIP
    [4]
    """
    from search.api._enqueue import enqueue as queue

    coordinator, _ = _open(name, where)
    return queue(coordinator, configs)


def status(name: str, **where: Any) -> Snapshot:
    """Where a study stands (``search status``): counts, running trials, best value, rate, ETA.

    >>> search.status("resmlp", project_dir="/tmp/demo").finished  # doctest: +SKIP
    4
    """
    from search.observation import snapshot

    coordinator, _ = _open(name, where)
    return snapshot(coordinator)


def trials(name: str, *, states: tuple[str, ...] | None = None, **where: Any) -> pandas.DataFrame:
    """Every trial of a study as a pandas DataFrame, one row per trial (``search trials --json``):
    ``number``, ``state``, ``value``, ``params`` and ``metrics`` (dicts), ``epochs``, durations,
    worker, host, ``retry_of``, ``fail_reason``, ``mlflow_run_id``.

    >>> df = search.trials("resmlp", project_dir="/tmp/demo")  # doctest: +SKIP
    >>> df.sort_values("value").head(3)[["number", "value", "epochs"]]  # doctest: +SKIP
    """
    import pandas as pd

    from search.observation import trial_rows

    coordinator, _ = _open(name, where)
    rows = trial_rows(coordinator, tuple(s.upper() for s in states) if states else None)
    return pd.DataFrame([asdict(row) for row in rows])


def best(name: str, **where: Any) -> dict[str, Any]:
    """The best complete trial and the champion (``search best --json``): ``trial``, ``value``,
    ``params``, ``epochs``, ``mlflow_run_id`` and ``champion`` (None before a retrain registered one)."""
    from search.api._results import best_trial

    coordinator, loc = _open(name, where)
    return best_trial(coordinator, loc)


def retrain(name: str, trial: int | None = None, *, quiet: bool = True, **where: Any) -> RetrainResult:
    """Retrain a trial (default: the best) at full scale, test it once and register it (``search
    retrain``); ``champion`` moves to it only if its test metric beats the champion's."""
    from search.observation import RetrainView
    from search.tracking import retrain_and_register

    coordinator, loc = _open(name, where)
    view = RetrainView(coordinator.read_record().metric, quiet=quiet)
    return retrain_and_register(coordinator, loc, trial, progress=view)


def export(name: str, *, version: str | None = None, format: str = "onnx", output: str | Path | None = None,
           **where: Any) -> Path:  # fmt: skip
    """Write the champion (or ``version``) as an ONNX or TorchScript file that runs without this
    project (``search export``); returns its path (``./<study>-v<version>.onnx`` by default)."""
    from search.api._results import export_model_file

    coordinator, loc = _open(name, where)
    return export_model_file(coordinator, loc, version, format, None if output is None else Path(output))[1]


def quantize(name: str, *, version: str | None = None, output: str | Path | None = None,
             tolerance: float | None = None, **where: Any) -> tuple[QuantizeReport, Path | None]:  # fmt: skip
    """Export the champion's (or ``version``'s) ONNX file and an int8 copy beside it, measured against
    it first (``search export --quantize int8``): the report, and the int8 file's path, None when the
    study's test metric is worse than the float file's by more than ``tolerance`` (relative; None:
    ``search.tracking.DEFAULT_TOLERANCE``, 5%)."""
    from search.api._results import export_model_file, quantize_model_file
    from search.tracking import DEFAULT_TOLERANCE

    coordinator, loc = _open(name, where)
    path = export_model_file(coordinator, loc, version, "onnx", None if output is None else Path(output))[1]
    return quantize_model_file(coordinator, loc, path, DEFAULT_TOLERANCE if tolerance is None else tolerance)


def report(name: str, output: str | Path | None = None, *, attach: bool = True, **where: Any) -> ReportResult:
    """Write the study's one-page HTML report (``search report``), attached to its MLflow parent run
    unless ``attach`` is False."""
    from search.observation import write_report

    coordinator, loc = _open(name, where)
    return write_report(coordinator, loc, Path(output or f"{coordinator.study_name}-report.html"), attach=attach)


_WHERE = ("storage", "tracking_uri", "artifact_location", "project_dir", "checkpoint_dir", "tensorboard")


def _where(**where: Any) -> dict[str, Any]:
    unknown = sorted(set(where) - set(_WHERE))
    if unknown:
        from search.exceptions import SearchError

        raise SearchError(f"unknown argument{'s' * (len(unknown) > 1)} {', '.join(unknown)}; where a study lives is "
                          f"given by {', '.join(_WHERE)}")  # fmt: skip
    paths = {"project_dir", "checkpoint_dir", "tensorboard"}
    return {key: (Path(where[key]) if key in paths and where.get(key) is not None else where.get(key))
            for key in _WHERE}  # fmt: skip


def _open(name: str, where: dict[str, Any]) -> tuple[Any, Any]:
    from search.api._open import open_existing_with_locations

    return open_existing_with_locations({"name": name, **_where(**where)})


def _summary(coordinator: Any) -> dict[str, Any]:
    from search.observation import study_summary

    return study_summary(coordinator)


def _champion(coordinator: Any, loc: Any) -> Champion | None:
    from search.tracking import Tracker, read_champion

    return read_champion(Tracker(loc.tracking()), coordinator.study_name)
