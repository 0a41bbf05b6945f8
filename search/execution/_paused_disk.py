"""The disk that freeze-thaw's paused trials keep: bounded while the study runs, freed when it ends.

With ``--pruner asha:disk=20GB`` a worker whose trial has just paused looks, under the study lock,
at what every paused trial's folder (``trial-N`` under the checkpoint root) takes. Past the bound,
the paused trials least likely to be resumed (:func:`search.settings._freeze_thaw.to_evict`) become
plain pruned trials (``paused_at`` becomes ``paused_evicted``), written on the lock's transaction so
that it commits with the lock's release, and only then are their folders removed: a claim, which
resumes paused trials under the same lock, either resumed one before (then it is no longer paused
here, and its folder is a live trial's, never touched) or sees it evicted.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import storage as st
from search.coordination import retrying
from search.exceptions import DatabaseUnavailableError
from search.execution._context import WorkerContext
from search.settings import PAUSED_AT_ATTR, PAUSED_EVICTED_ATTR, exploiting_spec, pausing_spec, study_dir
from search.settings._freeze_thaw import to_evict

log = logging.getLogger(__name__)


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (0 if it is not there), each file once (``best.pt`` is
    a hard link to an epoch's checkpoint where the file system allows); a file removed meanwhile counts 0."""
    seen: dict[tuple[int, int], int] = {}
    for path in folder.rglob("*") if folder.is_dir() else ():
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        if path.is_file():
            seen[(stat.st_dev, stat.st_ino)] = stat.st_size
    return sum(seen.values())


def bound_paused_disk(ctx: WorkerContext) -> list[int]:
    """After a trial paused: with a bound on the paused trials' disk (``asha:disk``), evict the
    checkpoints of those least likely to be resumed until the rest fit; the logical trials evicted.
    Its trouble is logged, not the trial's: the trial has paused already."""
    pruner: Any = ctx.optuna_study.pruner
    if getattr(pruner, "disk", None) is None or pausing_spec(pruner) is None:
        return []
    try:
        evicted = retrying(lambda: _evict(ctx, pruner), "bounding the paused trials' checkpoints")
    except DatabaseUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - the trial paused; the next pause tries again
        log.warning("could not bound the paused trials' checkpoints: %s", exc)
        return []
    root = study_dir(ctx.checkpoint_root, ctx.optuna_study.study_name)
    for number, (_, at, _) in evicted.items():
        shutil.rmtree(root / f"trial-{number}", ignore_errors=True)
        log.info("trial %d's checkpoint (paused at epoch %d) removed: the paused trials' checkpoints are bounded "
                 "to %s bytes (asha:disk); it ends pruned", number, at, pruner.disk)  # fmt: skip
    _tag_runs(ctx, evicted)
    return sorted(evicted)


def _evict(ctx: WorkerContext, pruner: Any) -> dict[int, tuple[int, int, int]]:
    """Under the study lock: choose and mark the evicted paused trials; logical number -> (trial id,
    epoch, bytes). Marked on the lock's transaction: when this returns, the marks have committed."""
    study, coordinator = ctx.optuna_study, ctx.coordinator
    root = study_dir(ctx.checkpoint_root, study.study_name)
    sid = coordinator.study_id()
    with coordinator.lock() as conn:
        st.check_lock(conn)
        bind = conn if conn is not None else coordinator.storage.engine
        paused = st.paused_trials(bind, sid, PAUSED_AT_ATTR)
        if not paused:
            return {}
        sizes = {n: folder_bytes(root / f"trial-{n}") for n in paused}
        if sum(sizes.values()) <= pruner.disk:
            return {}
        values = st.values_at(bind, sid, sorted({at for _, at in paused.values()}))
        rungs = {n: at for n, (_, at) in paused.items()}
        maximize = study.direction.name == "MAXIMIZE"
        chosen = to_evict(values, rungs, sizes, pruner.disk, pruner.factor, maximize)
        st.evict_paused(bind, [paused[n][0] for n in chosen], PAUSED_AT_ATTR, PAUSED_EVICTED_ATTR)
    return {n: (paused[n][0], paused[n][1], sizes[n]) for n in chosen}


def _tag_runs(ctx: WorkerContext, evicted: dict[int, tuple[int, int, int]]) -> None:
    """The evicted attempts' MLflow runs say so: ``hpsearch.state=PRUNED``, ``hpsearch.paused_evicted``."""
    for number, (trial_id, at, _) in evicted.items():
        try:
            run_id = ctx.coordinator.storage.get_trial(trial_id).user_attrs.get("mlflow_run_id")
            if run_id:
                ctx.tracker.set_tags(run_id, {"hpsearch.state": "PRUNED", "hpsearch.paused_evicted": at})
        except Exception as exc:  # noqa: BLE001 - bookkeeping only
            log.warning("could not tag the MLflow run of trial %d as evicted: %s", number, exc)


def discard_paused(ctx: WorkerContext) -> None:
    """The study is over: the checkpoints of its paused trials that no worker resumed are not
    needed any more (each stays PRUNED, with the values it reported), nor, under population-based
    training, any trial's; nor the folders of evicted ones, should a worker have died before it
    removed them."""
    root = study_dir(ctx.checkpoint_root, ctx.optuna_study.study_name)
    if exploiting_spec(ctx.optuna_study.pruner) is not None:  # population-based training kept them all
        for folder in root.glob("trial-*"):
            shutil.rmtree(folder, ignore_errors=True)
        return
    if pausing_spec(ctx.optuna_study.pruner) is None:
        return
    engine, sid = ctx.coordinator.storage.engine, ctx.coordinator.study_id()
    paused = retrying(lambda: st.paused_trials(engine, sid, PAUSED_AT_ATTR), "reading paused trials")
    evicted = retrying(lambda: st.paused_trials(engine, sid, PAUSED_EVICTED_ATTR), "reading evicted trials")
    for number in [*paused, *evicted]:
        shutil.rmtree(root / f"trial-{number}", ignore_errors=True)
    if paused:
        log.info("the study is over: removed the checkpoints of %d paused trials", len(paused))
