"""MLflow: one experiment per study, a parent run per study, a child run per trial."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from search.coordination import TRACKING_OUTAGE, resilient
from search.tracking._runlog import (
    MAX_PARAMS_PER_BATCH,
    RunLogger,
    RunStartError,
    Writer,
    clean,
    import_mlflow,
    metrics_of,
    params_of,
    points_of,
    tags_of,
)
from storage import TrackingLocation, mask

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from optuna.trial import FrozenTrial

log = logging.getLogger(__name__)
ROLE_TAG = "hpsearch.role"
STATE_TAG = "hpsearch.state"
OnCreated = Callable[[str], None] | None
"""Called with a new run's id (a trial records it)."""


EXPERIMENT_TAGS = {
    # MLflow 3's UI opens an experiment of no kind in its GenAI view; a study's runs are training runs.
    "mlflow.experimentKind": "custom_model_development",
    "mlflow.note.content": "An hpsearch study: the study's run holds one nested run per trial (expand it with the "
    "+ beside its name, or search `tags.hpsearch.role = 'trial'` to list the trials flat); the retrained "
    "champion is the run tagged retrain=true. Add columns for the metrics you compare (val_loss, val_accuracy) "
    "and params from the Columns menu.",
}
"""Set on the experiment a study creates."""


class Tracker:
    """Thin layer over ``MlflowClient`` (explicit run ids: safe in many processes at once)."""

    def __init__(self, location: TrackingLocation) -> None:
        self.location = location
        self._client: MlflowClient | None = None
        self._client_lock = threading.Lock()
        self._writer = Writer()
        self._opening: list[threading.Event] = []  # runs being created on the writer thread (open_child)

    @property
    def client(self) -> MlflowClient:
        """MLflow's client, made on first use (importing MLflow takes seconds: a worker makes it in
        the background while its first trial starts)."""
        with self._client_lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self) -> MlflowClient:
        import_mlflow()
        from mlflow import MlflowClient

        from storage import bound_tracking_pool, prepare_sqlite_tracking

        bound_tracking_pool()
        prepare_sqlite_tracking(self.location)
        db_log = logging.getLogger("mlflow.store.db.utils")
        if not db_log.isEnabledFor(logging.DEBUG):  # it logs every lost connection with a traceback
            db_log.setLevel(logging.CRITICAL)
        # A database-backed store can restart under a worker: ride it out like Optuna's storage.
        client = MlflowClient(self.location.tracking_uri, self.location.registry_uri)
        return resilient(client, "using MLflow", TRACKING_OUTAGE)  # type: ignore[no-any-return]

    def experiment_id(self, name: str) -> str:
        import_mlflow()  # a worker's may be on its way on another thread
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name, artifact_location=self.location.artifact_location,
                                                     tags=EXPERIMENT_TAGS))  # fmt: skip
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

    @property
    def ready(self) -> bool:
        """Whether MLflow is imported and its client made: :meth:`start_child` would not wait for them."""
        return self._client is not None

    def start_child(self, experiment_id: str, parent_run_id: str, name: str, role: str, tags: Mapping[str, Any],
                    on_created: OnCreated = None, end_first: str | None = None) -> RunLogger:  # fmt: skip
        """A created run (:class:`RunStartError` if MLflow refused it). Before it, the run
        ``end_first`` (a dead attempt's) is ended KILLED; after it, ``on_created(run_id)`` runs (a
        trial records its run), and if that fails the new run is ended KILLED and the error raised."""
        return RunLogger(self, self._start(experiment_id, parent_run_id, name, role, tags, on_created, end_first))

    def open_child(self, parent: Callable[[], tuple[str, str]], name: str, role: str, tags: Mapping[str, Any],
                   on_created: OnCreated = None, end_first: str | None = None) -> RunLogger:  # fmt: skip
        """:meth:`start_child` without waiting: all of it runs on the writer thread, first of the
        run's writes, while the caller goes on (training, for a trial); ``parent()`` gives the
        experiment and parent run ids there (it may wait for them). Whatever fails is the run's
        start error: raised by its next :meth:`RunLogger.log` or :meth:`RunLogger.flush`, and the
        run's writes are dropped."""
        logger = RunLogger(self, None)
        self._opening = [*(event for event in self._opening if not event.is_set()), logger._started]

        def create() -> None:
            try:
                # MLflow's import (seconds) while the parent run may still be on its way; not its store:
                # opening a new database's store creates its tables, which `search start` is doing.
                import_mlflow()
                experiment_id, parent_run_id = parent()
                logger._run_id = self._start(experiment_id, parent_run_id, name, role, tags, on_created, end_first)
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that trains
                logger._start_error = exc
            finally:
                logger._started.set()

        self._writer.submit(create, always=True)  # its caller waits for it
        return logger

    def wait_for_opened(self, timeout: float) -> None:
        """Wait, at most ``timeout`` s, until the runs :meth:`open_child` is creating exist (or failed):
        then their trials carry their ids (``on_created``), for whoever ends such a trial's run."""
        deadline = time.monotonic() + timeout
        for event in self._opening:
            event.wait(max(0.0, deadline - time.monotonic()))

    def _start(self, experiment_id: str, parent_run_id: str, name: str, role: str, tags: Mapping[str, Any],
               on_created: OnCreated, end_first: str | None) -> str:  # fmt: skip
        if end_first:
            self.mark_killed(end_first)
        all_tags = {"mlflow.parentRunId": parent_run_id, ROLE_TAG: role, **tags}
        try:
            run = self.client.create_run(experiment_id, run_name=name, tags={k: clean(v) for k, v in all_tags.items()})
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0][:300]
            raise RunStartError(mask(f"MLflow run could not start: {type(exc).__name__}: {first}")) from exc
        run_id = str(run.info.run_id)
        if on_created is not None:
            try:
                on_created(run_id)
            except BaseException:
                # Nobody else knows this run (e.g. the trial was reaped while this worker was frozen):
                # end it, without letting that clean-up replace what went wrong.
                try:
                    self.mark_killed(run_id)
                except Exception as exc:  # noqa: BLE001 - the study's end closes it (end_orphaned_trial_runs)
                    log.warning("could not end MLflow run %s: %s", run_id, exc)
                raise
        return run_id

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        items = params_of(params.items())
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=items[start : start + MAX_PARAMS_PER_BATCH])

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        self.client.log_batch(run_id, tags=tags_of(tags.items()))

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        self.client.log_batch(run_id, metrics=metrics_of(points_of(metrics, step)))

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def mark_killed(self, run_id: str) -> None:
        """End the run of a dead attempt KILLED.

        Also when it says FINISHED: a worker that died between ending its run and telling Optuna
        left a finished run for a trial that was then failed. A run ended FAILED stays so.
        """
        import_mlflow()  # a worker's may be on its way on another thread
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
