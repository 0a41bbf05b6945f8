"""``search worker``: join a study from any machine and train until its budget is spent."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from search.api._open import LOCATION_FLAGS, locations, open_existing_with_locations, study_name
from search.coordination import PARENT_RUN_ATTR, retrying
from search.exceptions import SearchError, StudyIncompleteError
from search.execution import (
    ENV_EARLY,
    ENV_SHARDING,
    ENV_STALL_TIMEOUT,
    Nodes,
    Restarts,
    await_release,
    check_gpus_to_share,
    check_sharing,
    connect,
    default_worker_id,
    interrupt_running,
    launch,
    parse_gpus,
    run_rank,
    run_worker,
    spawn_worker,
    spawn_workers,
    visible_gpus,
    wait_for_workers,
)
from search.execution._machine import ENV_GPU_MEMORY_FRACTION
from storage import StorageError

if TYPE_CHECKING:
    from search.coordination import Coordinator
    from search.settings import Locations

log = logging.getLogger(__name__)


def run_worker_command(kwargs: dict[str, Any], debug: bool) -> int:
    """``search worker``: one process per GPU slot, a process group per multi-process trial, or this process."""
    gpus_flag, index = kwargs.pop("gpus"), kwargs.pop("worker_index")
    gpus_per_trial, procs_per_trial = kwargs.pop("gpus_per_trial"), kwargs.pop("procs_per_trial")
    per_gpu, fraction = kwargs.pop("workers_per_gpu"), kwargs.pop("gpu_memory_fraction")
    stall_timeout, sharding = kwargs.pop("stall_timeout"), kwargs.pop("sharding")
    if stall_timeout is not None:  # this process, the workers and ranks it starts: over the study's value
        os.environ[ENV_STALL_TIMEOUT] = str(stall_timeout)
    nnodes, endpoint, rdzv_id = kwargs.pop("nnodes"), kwargs.pop("rdzv_endpoint"), kwargs.pop("rdzv_id")
    if kwargs.pop("rank_of_group"):
        return _run_rank(kwargs, index)
    early = bool(os.environ.get(ENV_EARLY))
    if early:
        name = await_release()
        if name is None:
            return 0  # `search start` could not create the study; it says why
        kwargs["name"] = name
        # Where the study lives came with the word, as the environment a later worker gets: the
        # location flags this process parsed at its start (the command's own environment and
        # search.toml, before the command resolved them) give way to it.
        kwargs.update(dict.fromkeys(LOCATION_FLAGS))
    if gpus_per_trial < 1 or procs_per_trial < 1:
        raise SearchError("--gpus-per-trial and --procs-per-trial must be >= 1")
    nodes = _nodes(nnodes, endpoint, rdzv_id)
    if sharding == "fsdp" and max(gpus_per_trial, procs_per_trial, nodes.count) == 1:
        raise SearchError("--sharding fsdp needs trials of several processes: --gpus-per-trial, "
                          "--procs-per-trial or --nnodes 2 or more")  # fmt: skip
    os.environ[ENV_SHARDING] = sharding  # read by the ranks of the groups launched below
    gpus = parse_gpus(gpus_flag) if gpus_flag is not None else None
    if gpus_per_trial > 1 and not gpus:
        gpus = parse_gpus("all")
    gpus = _shared_gpus(gpus, per_gpu, fraction, max(gpus_per_trial, procs_per_trial, nodes.count) > 1)
    coordinator, loc = wait_for_study(kwargs, kwargs.pop("wait_for_db"), created_only=not early)
    if not early:  # `search start` recorded its own; this one's trials may leave folders here if it dies
        retrying(lambda: coordinator.remember_checkpoint_root(loc.checkpoint_root), "recording the checkpoint root")
    if nodes.count > 1 and not nodes.run_id:
        nodes = replace(nodes, run_id=f"{coordinator.study_name}-{index}")
    release = coordinator.storage.engine.dispose  # for branches whose processes connect on their own
    if gpus_per_trial > 1 or procs_per_trial > 1 or nodes.count > 1:
        release()
        return _run_groups(loc, coordinator.study_name, gpus if gpus_per_trial > 1 or nodes.count > 1 else None,
                           max(gpus_per_trial, procs_per_trial), index, debug, nodes)  # fmt: skip
    count = len(gpus) * per_gpu if gpus else 1
    if gpus and count > 1:
        release()
        name = coordinator.study_name
        procs = spawn_workers(loc, name, count, gpus, debug, fraction)
        codes = wait_for_workers(procs, lambda: None, Restarts(lambda i: spawn_worker(loc, name, i, count, gpus,
                                                                                      debug, fraction)))  # fmt: skip
        return max((c or 0) for c in codes)
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]
    if fraction is not None:  # alone on its GPU: capped only when told
        os.environ[ENV_GPU_MEMORY_FRACTION] = str(fraction)
    ctx = connect(loc, coordinator.study_name, default_worker_id(index), coordinator, early=early)
    try:
        report = run_worker(ctx)
    except KeyboardInterrupt:
        interrupt_running(ctx)
        return 130
    log.info("worker %s done: %d trials", ctx.worker_id, len(report.outcomes))
    return 0


def _shared_gpus(gpus: list[str] | None, per_gpu: int, fraction: float | None, groups: bool) -> list[str] | None:
    """The GPUs that ``--workers-per-gpu`` workers share (``--gpus``, else all visible), the flags checked."""
    check_sharing(per_gpu, fraction)
    if per_gpu == 1 and fraction is None:
        return gpus
    if groups:
        raise SearchError("--workers-per-gpu and --gpu-memory-fraction share a GPU among one-GPU trials: "
                          "not with --gpus-per-trial, --procs-per-trial or --nnodes")  # fmt: skip
    present = gpus if gpus is not None else visible_gpus()
    check_gpus_to_share(present, per_gpu, fraction)
    return present if per_gpu > 1 else gpus  # a capped worker alone on the GPUs it has runs in this process


CREATION_WAIT_S = 120.0
"""How long any worker waits for a study that ``search start`` is creating (it is in the storage, its
MLflow parent run not yet): a Slurm array or Kubernetes Job started beside the ``start`` job meets it
so. As long as a trial's run waits for the parent run (``execution._context.PARENT_WAIT_S``)."""


def wait_for_study(kwargs: dict[str, Any], seconds: float, created_only: bool = True) -> tuple[Coordinator, Locations]:
    """Open the study, waiting up to ``seconds`` for its database and the study itself to appear,
    and (``created_only``) up to ``max(seconds, CREATION_WAIT_S)`` for ``search start`` to finish
    creating it: its record and parent run, stored last.

    One line when the wait starts and one when it ends; past the limit, the last error.
    """
    if not seconds >= 0:
        raise SearchError(f"--wait-for-db must be >= 0 seconds, got {seconds:g}")
    started, delay, waited = time.monotonic(), 1.0, False
    while True:
        try:
            # A server that is restarting (refusing connections, "shutting down", "starting up") is
            # an outage, ridden out up to --db-outage-limit and then exit 75, as for a running worker.
            found = retrying(lambda: _open_study(kwargs, created_only), "opening the study")
        except (StorageError, SearchError) as exc:  # no study (yet); an outage past the limit (75 once past the wait)
            creating = isinstance(exc, StudyIncompleteError) and created_only
            limit = max(seconds, CREATION_WAIT_S) if creating else seconds
            left = started + limit - time.monotonic()
            if left <= 0:
                if creating:
                    raise StudyIncompleteError(f"{exc} after {limit:g} s: if `search start` stopped before it "
                                               "finished, run it again to finish the study") from exc  # fmt: skip
                raise
            if not waited:
                log.warning("waiting up to %g s for the study: %s", limit, exc)
                waited = True
            time.sleep(min(delay, left))
            delay = min(2 * delay, 2.0 if creating else 10.0)  # `search start` takes seconds, not minutes
            continue
        if waited:
            log.warning("study %r found after %.0f s; joining it", found[0].study_name, time.monotonic() - started)
        return found


def _open_study(kwargs: dict[str, Any], created_only: bool) -> tuple[Coordinator, Locations]:
    found = open_existing_with_locations(dict(kwargs))
    if created_only and PARENT_RUN_ATTR not in found[0].load().user_attrs:  # `search start` is still creating it
        found[0].storage.engine.dispose()
        raise StudyIncompleteError(f"study {found[0].study_name!r} is still being created (no MLflow parent run yet)")
    return found


def _nodes(count: int, endpoint: str | None, run_id: str | None) -> Nodes:
    """``--nnodes``, ``--rdzv-endpoint`` and ``--rdzv-id``, checked (the id is filled in once the study is found)."""
    if count < 1:
        raise SearchError(f"--nnodes must be >= 1, got {count}")
    if count == 1:
        if endpoint or run_id:
            raise SearchError("--rdzv-endpoint and --rdzv-id need --nnodes 2 or more")
        return Nodes()
    if not endpoint:
        raise SearchError(f"--nnodes {count} needs --rdzv-endpoint HOST:PORT, the same on every node")
    host, _, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "29400")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SearchError(f"--rdzv-endpoint must be HOST:PORT, got {endpoint!r}")
    return Nodes(count, f"{host}:{port}", run_id or "")


def _run_groups(loc: Locations, name: str, gpus: list[str] | None, size: int, index: int, debug: bool,
                nodes: Nodes) -> int:  # fmt: skip
    """One process group per ``size`` GPUs (or one CPU group), each running trials until the study is done."""
    from concurrent.futures import ThreadPoolExecutor

    if gpus is not None and len(gpus) < size:
        raise SearchError(f"--gpus-per-trial {size} needs at least {size} GPUs, {len(gpus)} given")
    groups = [gpus[i : i + size] for i in range(0, len(gpus) - size + 1, size)] if gpus else [[]]
    if nodes.count > 1 and len(groups) > 1:
        raise SearchError(f"with --nnodes, a node runs one trial group: --gpus-per-trial {len(gpus or [])} "
                          "(all of this node's GPUs), or one `search worker` per group with its own "
                          "--rdzv-endpoint")  # fmt: skip
    with ThreadPoolExecutor(len(groups)) as pool:
        codes = list(pool.map(lambda g: launch(loc, name, size, g[1], index * 100 + g[0], debug, nodes),
                              enumerate(groups)))  # fmt: skip
    return max(codes)


def _run_rank(kwargs: dict[str, Any], index: int) -> int:
    """One rank of a multi-process trial group; only rank 0 opens the study."""
    name = study_name(kwargs)
    loc = locations(kwargs, create=False)
    return run_rank(loc, name, index, os.environ["HPSEARCH_GANG_WORKER_ID"])
