"""A study's results, read for :mod:`search.api` and the commands over it: the best trial and
champion, and the champion as a file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError

if TYPE_CHECKING:
    from search.coordination import Coordinator
    from search.settings import Locations


def best_trial(coordinator: Coordinator, loc: Locations) -> dict[str, Any]:
    """The best complete trial (value, params, epochs, MLflow run) and the champion, as ``search best
    --json`` prints them; one line if the study has no complete trial yet."""
    from search.observation import trial_rows
    from search.tracking import Tracker, read_champion

    record = coordinator.read_record()
    complete = [r for r in trial_rows(coordinator, ("COMPLETE",)) if r.value is not None]
    if not complete:
        raise SearchError(f"study {coordinator.study_name!r} has no complete trial yet")
    pick = min if record.direction == "minimize" else max
    top = pick(complete, key=lambda r: float(r.value))  # type: ignore[arg-type]
    champion = read_champion(Tracker(loc.tracking()), coordinator.study_name)
    return {
        "study": coordinator.study_name, "metric": record.metric, "direction": record.direction,
        "trial": top.number, "value": top.value, "params": top.params, "epochs": top.epochs,
        "mlflow_run_id": top.mlflow_run_id,
        "champion": None if champion is None else {
            "model": champion.model_name, "version": champion.version, "source_trial": champion.source_trial,
            "test_metrics": champion.test_metrics, "exports": champion.exports, "run_id": champion.run_id,
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
