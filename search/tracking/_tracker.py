"""MLflow: one experiment per study, a parent run per study, a child run per trial."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from search.coordination import TRACKING_OUTAGE, resilient
from storage import TrackingLocation, mask

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from optuna.trial import FrozenTrial

log = logging.getLogger(__name__)
ROLE_TAG = "hpsearch.role"
STATE_TAG = "hpsearch.state"


MAX_PARAMS_PER_BATCH = 100  # MLflow's limit for one log_batch
MAX_METRICS_PER_BATCH = 900  # MLflow's is 1000 entities a batch: room for the params and tags
SEND_EVERY_S = 5.0
"""A run's epochs are sent together at most this often (the first at once, the rest at the end)."""


def _clean(value: Any) -> str:
    return mask(str(value))[:6000]


def _params(params: Mapping[str, Any]) -> list[Any]:
    from mlflow.entities import Param

    return [Param(str(k), _clean(v)) for k, v in params.items()]


def _metrics(metrics: Mapping[str, float], step: int) -> list[Any]:
    """MLflow metrics at ``step``; the epoch number is the step, not a metric."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [Metric(k, float(v), now, step) for k, v in metrics.items() if k != "epoch"]


class Tracker:
    """Thin layer over ``MlflowClient`` (explicit run ids: safe in many processes at once)."""

    def __init__(self, location: TrackingLocation) -> None:
        from mlflow import MlflowClient

        from storage import bound_tracking_pool, prepare_sqlite_tracking

        bound_tracking_pool()
        prepare_sqlite_tracking(location)
        self.location = location
        # A database-backed store can restart under a worker: ride it out like Optuna's storage.
        client = MlflowClient(location.tracking_uri, location.registry_uri)
        self.client: MlflowClient = resilient(client, "using MLflow", TRACKING_OUTAGE)
        self._writer = _Writer()
        db_log = logging.getLogger("mlflow.store.db.utils")
        if not db_log.isEnabledFor(logging.DEBUG):  # it logs every lost connection with a traceback
            db_log.setLevel(logging.CRITICAL)

    def experiment_id(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name, artifact_location=self.location.artifact_location))
        except MlflowException:  # another process created it first
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def start_parent(self, experiment_id: str, study_name: str, summary: Mapping[str, Any]) -> str:
        run = self.client.create_run(
            experiment_id, run_name=study_name, tags={ROLE_TAG: "study", "hpsearch.study": study_name}
        )
        self.log_params(run.info.run_id, summary)
        return str(run.info.run_id)

    def start_child(
        self, experiment_id: str, parent_run_id: str, name: str, role: str, tags: Mapping[str, Any]
    ) -> RunLogger:
        all_tags = {"mlflow.parentRunId": parent_run_id, ROLE_TAG: role, **tags}
        run = self.client.create_run(experiment_id, run_name=name, tags={k: _clean(v) for k, v in all_tags.items()})
        return RunLogger(self.client, str(run.info.run_id), self._writer)

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        items = _params(params)
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=items[start : start + MAX_PARAMS_PER_BATCH])

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(str(k), _clean(v)) for k, v in tags.items()])

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        self.client.log_batch(run_id, metrics=_metrics(metrics, step))

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def mark_killed(self, run_id: str) -> None:
        """End the run of a dead attempt KILLED.

        Also when it says FINISHED: a worker that died between ending its run and telling Optuna
        left a finished run for a trial that was then failed. A run ended FAILED stays so.
        """
        from mlflow.exceptions import MlflowException

        try:
            if self.client.get_run(run_id).info.status in ("RUNNING", "SCHEDULED", "FINISHED"):
                self.client.set_terminated(run_id, status="KILLED")
        except MlflowException:
            pass

    def end_dead_run(self, trial: FrozenTrial) -> None:
        """Mark a reaped trial's MLflow run KILLED (a retry links to it with ``hpsearch.retry_of``)."""
        run_id = trial.user_attrs.get("mlflow_run_id")
        if not run_id:
            return
        try:
            self.set_tags(run_id, {"hpsearch.state": "FAIL", "hpsearch.fail_reason": "worker lost"})
            self.mark_killed(run_id)
        except Exception as exc:  # noqa: BLE001 - bookkeeping must not stop a reaper
            log.warning("could not end the MLflow run of dead trial %d: %s", trial.number, exc)


class RunLogger:
    """One run's metrics, params and end, written in order without holding up training.

    A :class:`trainer.MetricsSink`: the metrics of the epochs of ``SEND_EVERY_S`` seconds become one
    ``log_batch``, sent at the first epoch that ends that long after the previous batch (or after
    the run began), and at :meth:`flush` and :meth:`finish`: a study of short epochs costs its
    tracking server one request every few seconds per trial, not one an epoch, and a trial shorter
    than the interval one batch in all (its params, metrics and final tags). A run shows its
    params and first values within the interval, or with its first epoch when epochs are longer.
    Writes go to a background thread (one per tracker, so a run's writes keep their order) and
    overlap training; params wait for the next batch instead of costing a round trip of their own.
    :meth:`finish` and :meth:`flush` wait for every write, and raise the first that failed.
    """

    def __init__(self, client: MlflowClient, run_id: str, writer: _Writer) -> None:
        self.client = client
        self.run_id = run_id
        self._writer = writer
        self._pending: list[Any] = []
        self._metrics: list[Any] = []
        self._sent_at = time.monotonic()  # the first batch waits for the interval too

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Sent with the next batch."""
        self._pending.extend(_params(params))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._metrics.extend(_metrics(metrics, step))
        if time.monotonic() - self._sent_at >= SEND_EVERY_S:
            self._send([])

    def finish(self, tags: Mapping[str, Any], status: str) -> None:
        """Set the final tags, end the run, and wait until MLflow has all of it."""
        from mlflow.entities import RunTag

        self._send([RunTag(str(k), _clean(v)) for k, v in tags.items()])
        self._writer.submit(self.client.set_terminated, self.run_id, status=status)
        self.flush()

    def flush(self) -> None:
        """Send what is held back; wait for this tracker's queued writes; raise the first that failed."""
        if self._pending or self._metrics:
            self._send([])
        self._writer.flush()

    def _send(self, tags: list[Any]) -> None:
        """The held metrics with the pending params; beyond one batch's limits, batches of their own."""
        self._sent_at = time.monotonic()
        while len(self._pending) > MAX_PARAMS_PER_BATCH:
            self._writer.submit(self.client.log_batch, self.run_id, params=self._pending[:MAX_PARAMS_PER_BATCH])
            self._pending = self._pending[MAX_PARAMS_PER_BATCH:]
        while len(self._metrics) > MAX_METRICS_PER_BATCH:
            self._writer.submit(self.client.log_batch, self.run_id, metrics=self._metrics[:MAX_METRICS_PER_BATCH])
            self._metrics = self._metrics[MAX_METRICS_PER_BATCH:]
        (params, self._pending), (metrics, self._metrics) = (self._pending, []), (self._metrics, [])
        self._writer.submit(self.client.log_batch, self.run_id, metrics=metrics, params=params, tags=tags)


class _Writer:
    """A queue of MLflow calls run in order on one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Callable[[], Any]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mlflow-writer", daemon=True)
                self._thread.start()
        self._queue.put(lambda: fn(*args, **kwargs))

    def flush(self) -> None:
        self._queue.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            call = self._queue.get()
            try:
                if self._error is None:  # after a failure, skip the rest until someone has seen it
                    call()
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that flushes
                self._error = exc
            finally:
                self._queue.task_done()
