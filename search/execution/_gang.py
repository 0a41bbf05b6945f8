"""Multi-process trials: K ranks train one trial together; only rank 0 talks to Optuna and MLflow.

The parent ``search worker`` launches the ranks with ``torch.distributed.run`` and relaunches the
group if it breaks. Rank 0 claims trials and broadcasts each trial's params (never the trial) to
the other ranks; every rank builds the same model and calls ``trainer.fit``; the pruning hook runs
on rank 0 only and the trainer carries its stop decision to every rank. A divergence is detected
on all ranks together (the trainer gathers the check), so a diverged trial ends everywhere at the
same step. Any other failure of a rank ends the whole group: the parent marks the trial FAIL with
that rank's error and starts a fresh group.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.coordination import Coordinator
from search.execution._context import group_sharding
from search.execution._machine import idle_wait
from search.execution._trial import fit_or_start_over, run_trial
from search.execution._worker import IDLE_POLL_S, connect, default_worker_id, search_subset
from search.settings import load_study, location_env

if TYPE_CHECKING:
    from search.settings import Locations

log = logging.getLogger(__name__)
MAX_RELAUNCHES = 3
"""Fresh groups in a row that may break before any trial: past that it is a crash loop, not a bad trial."""


def _broadcast(obj: Any = None) -> Any:
    from accelerate.utils import broadcast_object_list

    box = [obj]
    broadcast_object_list(box, from_process=0)
    return box[0]


class Gang:
    """Rank 0's link to the other ranks of its group."""

    def __init__(self) -> None:
        self.sent = False
        # torchrun's view: more ranks in the group than on this node means the group spans nodes.
        self.spans_nodes = int(os.environ.get("WORLD_SIZE", 1)) > int(os.environ.get("LOCAL_WORLD_SIZE", 1))

    def send_params(self, number: int, params: Any, ckpt_dir: Path) -> None:
        _broadcast(("fit", number, params, str(ckpt_dir)))
        self.sent = True

    def gather_epochs(self, epochs_run: int) -> list[int]:
        from accelerate.utils import gather_object

        return [int(e) for e in gather_object([epochs_run])]


def error_file(loc: Locations, worker_id: str, rank: int) -> Path:
    safe = worker_id.replace(":", "_").replace("/", "_")
    return loc.project_dir / "logs" / f"gang-{safe}-rank{rank}.json"


def run_rank(loc: Locations, study_name: str, index: int, worker_id: str) -> int:
    """Entry point of every rank (run under ``torch.distributed.run``)."""
    import torch
    from accelerate import PartialState

    # Accelerate's state is a per-process singleton: it must be created distributed-aware (gloo on
    # CPU) before anything else builds it, or each rank would train alone.
    state = PartialState(cpu=not torch.cuda.is_available())
    try:
        if state.is_main_process:
            code = _lead(loc, study_name, index, worker_id)
        else:
            _follow(state.process_index)
            code = 0
    except Exception as exc:
        path = error_file(loc, worker_id, state.process_index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"rank": state.process_index, "error": f"{type(exc).__name__}: {exc}"}))
        log.exception("rank %d failed", state.process_index)
        # Peers may be blocked in a collective this rank will never join: end the whole group now.
        os._exit(1)
    # Left to interpreter exit, the process group's native threads can abort the process
    # ("terminate called without an active exception", SIGABRT) and the group would look broken
    # after a clean finish, so the rank ends here. Every trial's writes were flushed when it ended.
    state.destroy_process_group()
    _flush_output()
    os._exit(code)


def _flush_output() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()


def _lead(loc: Locations, study_name: str, index: int, worker_id: str) -> int:
    ctx = connect(loc, study_name, worker_id)
    ctx.gang = Gang()
    _broadcast(("setup", ctx.record.study_ref, ctx.record.options, ctx.record.settings.seed))
    while True:
        claimed_at, ctx.cpu_at_claim = time.perf_counter(), time.process_time()
        trial, counts = ctx.coordinator.claim(ctx.optuna_study, ctx.pruner_trials, ctx.record.search_epochs)
        if trial is None:
            if counts.state("RUNNING") == 0:
                _broadcast(("done",))
                return 0
            _broadcast(("wait",))
            idle_wait(IDLE_POLL_S)
            continue
        ctx.gang.sent = False
        outcome = run_trial(ctx, trial, claimed_at)
        log.info("trial %d %s %s", outcome.number, outcome.state, outcome.reason)
        if not ctx.gang.sent:
            _broadcast(("skip",))
        elif outcome.state == "FAIL" and not outcome.reason.startswith("diverged"):
            # Other ranks may still be inside fit; only a fresh group is in a known state.
            raise RuntimeError(f"trial {outcome.number} failed on rank 0: {outcome.reason}")


def _follow(rank: int) -> None:
    import trainer
    from studies import study_infra

    _, ref, options, seed = _broadcast()
    study = load_study(ref, options)
    data = study.load_data()
    train = search_subset(data.train, study.search_fidelity.data_fraction, seed)
    while True:
        message = _broadcast()
        if message[0] == "done":
            return
        if message[0] != "fit":
            continue
        _, number, params, ckpt_dir = message
        config = study.train_config(params, study.search_fidelity).replace(sharding=group_sharding())
        infra = study_infra(study, params, study.search_fidelity).replace(
            checkpoint_dir=Path(ckpt_dir), resume=True, keep_last=1
        )

        def fit(config: Any, infra: Any, params: Any = params) -> Any:
            return trainer.fit(study.build_model(params, data), train, data.val, data.task, config, infra=infra)

        try:
            result = fit_or_start_over(fit, config, infra, f"rank {rank}: trial {number}")
        except trainer.DivergenceError:
            continue  # raised on every rank at the same step; rank 0 ends the trial
        Gang().gather_epochs(result.epochs_run)
        log.info("rank %d: trial %d ran %d epochs", rank, number, result.epochs_run)


@dataclass(frozen=True)
class Nodes:
    """A trial group spread over ``count`` nodes that meet through torchrun's c10d rendezvous.

    Every node runs the same ``search worker`` with the same ``endpoint`` (``host:port`` of one of
    them, or of any host every node reaches) and ``run_id``; each adds its own ranks to the group.
    """

    count: int = 1
    endpoint: str | None = None
    run_id: str = ""
    join_timeout_s: int = 600

    def torchrun_args(self) -> list[str]:
        if self.count == 1:
            return ["--standalone"]
        return [f"--nnodes={self.count}", "--rdzv-backend=c10d", f"--rdzv-endpoint={self.endpoint}",
                f"--rdzv-id={self.run_id}", f"--rdzv-conf=join_timeout={self.join_timeout_s}"]  # fmt: skip


def launch(loc: Locations, study_name: str, procs: int, gpus: list[str], index: int, debug: bool,
           nodes: Nodes | None = None) -> int:  # fmt: skip
    """Run one group of ``procs`` ranks (per node) until the study is done, relaunching it if it breaks."""
    nodes = nodes or Nodes()
    attempt = crashes = 0
    while crashes <= MAX_RELAUNCHES:
        worker_id = f"{default_worker_id(index)}:gang{attempt}"
        attempt += 1
        env = {**os.environ, **location_env(loc), "HPSEARCH_GANG_WORKER_ID": worker_id}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        else:
            env.setdefault("OMP_NUM_THREADS", "1")
            env["ACCELERATE_USE_CPU"] = "true"
        cmd = [sys.executable, "-m", "torch.distributed.run", *nodes.torchrun_args(), f"--nproc-per-node={procs}",
               "-m", "search", *(["--debug"] if debug else []), "worker", "--name", study_name,
               "--worker-index", str(index), "--rank-of-group"]  # fmt: skip
        code = subprocess.call(cmd, env=env)
        if code == 0 or _study_done(loc, study_name):
            return 0  # (the other nodes of a finished study close the rendezvous: no group to join)
        # A trial that breaks its group (a bug in the study, out of memory) costs that trial only.
        crashes = 0 if _fail_orphaned_trials(loc, study_name, worker_id, procs, nodes.count) else crashes + 1
        log.warning("process group %s exited with %d; starting a fresh group", worker_id, code)
    log.error("%d process groups in a row broke before running a trial; giving up", crashes)
    return 1


def _study_done(loc: Locations, study_name: str) -> bool:
    """Whether the budget is spent and no trial is running or queued: nothing left for a fresh group."""
    coordinator = Coordinator(loc.storage_url, study_name)
    try:
        counts = coordinator.counts()
        return counts.done(coordinator.budget())
    finally:
        coordinator.storage.engine.dispose()


def _fail_orphaned_trials(loc: Locations, study_name: str, worker_id: str, procs: int, nodes: int = 1) -> bool:
    """Trials the broken group left RUNNING end FAIL with the failing rank's error.

    Not retried when a rank of this node failed on its own (a bug in the study, out of memory);
    retried, as a dead worker's trial is, when the group spans nodes and this node's ranks only
    lost their peers (or were stopped by their agent): another node went away. ``procs`` is the
    ranks per node; this node's ranks left their error files here. Only the launcher whose rank 0
    ran the trial finds it (its worker id). Returns whether the group had run any trial at all.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    import storage as st
    from search.coordination import fail_and_retry
    from search.execution._finish import says_peer_lost
    from storage import mask

    reasons = []
    for rank in range(procs * nodes):
        path = error_file(loc, worker_id, rank)
        if path.exists():
            reasons.append(json.loads(path.read_text()))
            path.unlink()
    reason = "; ".join(f"rank {r['rank']}: {r['error']}" for r in reasons) or "a rank of the process group died"
    node_lost = nodes > 1 and all(says_peer_lost(r["error"]) for r in reasons)
    coordinator = Coordinator(loc.storage_url, study_name)
    study = coordinator.load()
    ran = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("worker") == worker_id]
    for trial in ran:
        if trial.state != TrialState.RUNNING:
            continue
        if node_lost:
            with coordinator.lock() as conn:
                st.check_lock(conn)
                lost = f"lost a node of its process group: {reason}"
                if fail_and_retry(coordinator.storage, study, st.trial_id(trial), mask(lost[:500])) is not None:
                    log.warning("trial %d failed: %s; queued its retry", trial.number, lost)
            continue
        try:
            coordinator.storage.set_trial_user_attr(st.trial_id(trial), "fail_reason", mask(reason[:500]))
            coordinator.storage.set_trial_state_values(st.trial_id(trial), state=TrialState.FAIL)
        except UpdateFinishedTrialError:  # a reaper finished it meanwhile, with its own reason
            continue
        log.warning("trial %d failed: %s", trial.number, reason)
    return bool(ran)
