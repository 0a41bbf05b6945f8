"""A study's results, read for :mod:`search.api` and the commands over it: the best trial and
champion, and the champion as a file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError

if TYPE_CHECKING:
    from search.coordination import Coordinator
    from search.settings import Locations
    from search.tracking import QuantizeReport


def best_trial(coordinator: Coordinator, loc: Locations) -> dict[str, Any]:
    """The champion trial (value, params, epochs, its folds' values in a k-fold study, final metrics with
    its deployment metrics, MLflow run)
    as the study's ``--select`` picks it among trials that meet its constraints, the Pareto front of a
    multi-objective study, and the registered champion model (its deployment metrics re-measured at
    full scale), as ``search best --json`` prints them; one line if no trial qualifies."""
    from search.observation import trial_rows
    from search.settings import Candidate, pareto_front, select
    from search.tracking import Tracker, read_champion

    record = coordinator.read_record()
    complete = [r for r in trial_rows(coordinator, ("COMPLETE",)) if r.values]
    if not complete:
        raise SearchError(f"study {coordinator.study_name!r} has no complete trial yet")
    rows = {r.number: r for r in complete}
    found = [Candidate(r.number, tuple(r.values or ()), r.feasible is not False) for r in complete]
    chosen = select(found, record.maximize(), record.settings.select)
    if chosen is None:
        raise SearchError(f"no complete trial of study {coordinator.study_name!r} meets its constraints "
                          f"({', '.join(record.constraints)})")  # fmt: skip
    top = rows[chosen.number]
    front = pareto_front(found, record.maximize()) if len(record.goals()) > 1 else []
    champion = read_champion(Tracker(loc.tracking()), coordinator.study_name)
    return {
        "study": coordinator.study_name, "metric": record.goals()[0].metric, "direction": record.goals()[0].direction,
        "objectives": [{"metric": o.metric, "direction": o.direction} for o in record.goals()],
        "constraints": record.constraints, "select": record.settings.select,
        "trial": top.number, "value": top.value, "values": top.values, "feasible": top.feasible,
        "params": top.params, "epochs": top.epochs, "folds": top.folds, "mlflow_run_id": top.mlflow_run_id,
        "metrics": top.metrics, "latency_batch": record.settings.latency_batch,
        "pareto_front": [{"trial": c.number, "values": list(c.values), "params": rows[c.number].params,
                          "champion": c.number == top.number} for c in front],
        "champion": None if champion is None else {
            "model": champion.model_name, "version": champion.version, "source_trial": champion.source_trial,
            "test_metrics": champion.test_metrics, "exports": champion.exports, "run_id": champion.run_id,
            "deployment": champion.deployment,
            "uri": f"models:/{champion.model_name}@champion",
        },
    }  # fmt: skip


def export_model_file(coordinator: Coordinator, loc: Locations, version: str | None, fmt: str,
                      output: Path | None) -> tuple[str, Path]:  # fmt: skip
    """Copy the champion's (or ``version``'s) checked export out of MLflow to ``output`` (default:
    ``./<study>-v<version>.onnx`` or ``.pt``); the version it holds, and where it is."""
    from search.tracking import FORMATS, Tracker, download_portable

    if fmt not in FORMATS:
        raise SearchError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
    name = coordinator.study_name
    target = output or Path(f"{name}-export.{'onnx' if fmt == 'onnx' else 'pt'}")
    got, path = download_portable(Tracker(loc.tracking()), name, version, fmt, target)
    if output is None:  # name the default file after the version it holds
        path = path.rename(path.with_name(f"{name}-v{got}{path.suffix}"))
    return str(got), Path(path)


def quantize_model_file(coordinator: Coordinator, loc: Locations, float_path: Path,
                        tolerance: float) -> tuple[QuantizeReport, Path | None]:  # fmt: skip
    """Quantize an exported ONNX file to int8 and measure both on the study's test split (the
    split the champion was tested on, loaded as retraining loads it). The int8 file is written
    beside it (``<name>.int8.onnx``) only when the study's metric stays within ``tolerance``
    (relative); otherwise none is, an int8 file left there by an earlier export (of another float
    file) is removed, and the report says why (``report.accepted``)."""
    import shutil
    import tempfile

    from search.settings import load_study
    from search.tracking import measure_quantized

    record = coordinator.read_record()
    data = load_study(record.study_ref, record.options, record.narrow).load_data()
    target = float_path.with_name(f"{float_path.stem}.int8.onnx")
    with tempfile.TemporaryDirectory(prefix="hpsearch-quantize-") as tmp:
        candidate = Path(tmp) / target.name
        report = measure_quantized(float_path, candidate, data, record.metric, record.direction, tolerance)
        if not report.accepted:
            target.unlink(missing_ok=True)
            return report, None
        shutil.copyfile(candidate, target)
    return report, target


def champion_to_serve(coordinator: Coordinator, loc: Locations) -> tuple[str, str | None]:
    """The champion's model URI, its version pinned (``models:/<study>/<version>``), and a request
    body for it (the input example logged with it, as MLflow's server takes it; None without one)."""
    from search.tracking import Tracker, read_champion, serving_example

    tracker = Tracker(loc.tracking())
    champion = read_champion(tracker, coordinator.study_name)
    if champion is None:
        raise SearchError(f"study {coordinator.study_name!r} has no registered champion to serve; "
                          "`search retrain` registers one")  # fmt: skip
    uri = f"models:/{champion.model_name}/{champion.version}"
    return uri, serving_example(tracker, uri)


def paused_checkpoints(coordinator: Coordinator, root: Path) -> tuple[int, int]:
    """How many folders the study's paused trials (freeze-thaw) keep under ``root``, and their bytes."""
    import storage as st
    from search.execution import folder_bytes
    from search.settings import PAUSED_AT_ATTR, study_dir

    paused = st.paused_trials(coordinator.storage.engine, coordinator.study_id(), PAUSED_AT_ATTR)
    folders = [study_dir(root, coordinator.study_name) / f"trial-{n}" for n in paused]
    present = [f for f in folders if f.is_dir()]
    return len(present), sum(folder_bytes(f) for f in present)


def paused_disk_bound(coordinator: Coordinator) -> int | None:
    """The bytes the study's paused trials' checkpoints may take (``asha:disk``); None: unbounded."""
    from search.settings import parse_pruner

    return parse_pruner(coordinator.read_record().settings.pruner).values.get("disk") or None
