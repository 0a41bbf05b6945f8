"""A run's writes from a worker: held, batched and sent by one background thread, in order."""

from __future__ import annotations

import functools
import gc
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from storage import mask

MAX_PARAMS_PER_BATCH = 100  # MLflow's limit for one log_batch
MAX_METRICS_PER_BATCH = 900  # MLflow's is 1000 entities a batch: room for the params and tags
SEND_EVERY_S = 5.0
"""A run's epochs are sent together at most this often (the first at once, the rest at the end)."""


def clean(value: Any) -> str:
    return mask(str(value))[:6000]


_IMPORTING = threading.Lock()
_IMPORTED = threading.Event()


def import_mlflow() -> None:
    """Import MLflow and its database store, one thread at a time: a worker imports them on a
    background thread while its first trial starts, and two threads importing MLflow's circular
    modules at once fail (``_DeadlockError``, partially initialized modules). Once done, free."""
    if _IMPORTED.is_set():
        return
    with _IMPORTING:
        import mlflow  # noqa: F401
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (the store a worker opens)

        # Hundreds of thousands of long-lived objects: kept out of the collector's full passes,
        # as the rest of a process's start-up is.
        gc.freeze()
        _IMPORTED.set()


def params_of(pairs: Iterable[tuple[Any, Any]]) -> list[Any]:
    import_mlflow()
    from mlflow.entities import Param

    return [Param(str(k), clean(v)) for k, v in pairs]


def tags_of(pairs: Iterable[tuple[Any, Any]]) -> list[Any]:
    import_mlflow()
    from mlflow.entities import RunTag

    return [RunTag(str(k), clean(v)) for k, v in pairs]


def points_of(metrics: Mapping[str, float], step: int) -> list[tuple[str, float, int, int]]:
    """(key, value, timestamp ms, step) of each metric; the epoch number is the step, not a metric."""
    now = int(time.time() * 1000)
    return [(k, float(v), now, step) for k, v in metrics.items() if k != "epoch"]


def metrics_of(points: list[tuple[str, float, int, int]]) -> list[Any]:
    import_mlflow()
    from mlflow.entities import Metric

    return [Metric(*point) for point in points]


class Owner(Protocol):
    """What a run needs of its tracker (``Tracker``): the client, its writer, tags and an end."""

    _writer: Writer

    @property
    def client(self) -> Any: ...

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None: ...

    def end_run(self, run_id: str, status: str = "FINISHED") -> None: ...


class RunStartError(Exception):
    """A trial's MLflow run could not be created (e.g. the tracking server answered 500)."""


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

    A run from :meth:`Tracker.open_child` is created on that thread too: until then
    :attr:`run_id` waits, and if it could not start, its writes are dropped and its start error
    is raised by the next :meth:`log` (the trial stops at its first epoch) or :meth:`flush`.
    """

    def __init__(self, tracker: Owner, run_id: str | None) -> None:
        self._tracker = tracker
        self._writer = tracker._writer
        self._run_id = run_id
        self._started = threading.Event()
        if run_id is not None:
            self._started.set()
        self._start_error: BaseException | None = None
        self._start_error_seen = False
        self._pending: list[tuple[str, Any]] = []  # params
        self._metrics: list[tuple[str, float, int, int]] = []
        self._sent_at = time.monotonic()  # the first batch waits for the interval too

    @property
    def run_id(self) -> str | None:
        """The run's id once it exists (waiting for its creation); None if it could not start."""
        self._started.wait()
        return self._run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Sent with the next batch."""
        self._pending.extend(params.items())

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        if self._start_error is not None:
            self._raise_start_error()
        self._metrics.extend(points_of(metrics, step))
        if time.monotonic() - self._sent_at >= SEND_EVERY_S:
            self._send({})

    def finish(self, tags: Mapping[str, Any], status: str) -> None:
        """Set the final tags, end the run, and wait until MLflow has all of it."""
        self._send(tags)
        self._submit(lambda run_id: self._tracker.client.set_terminated(run_id, status=status))
        self.flush()

    def end(self, status: str, tags: Mapping[str, Any], text: tuple[str, str] | None = None) -> None:
        """End the run now as ``status`` with ``tags`` (and ``text``, a (content, file name) artifact),
        after its queued writes; nothing if it never started."""
        run_id = self.run_id
        if run_id is None:
            return
        self._tracker.set_tags(run_id, tags)
        if text is not None:
            self._tracker.client.log_text(run_id, *text)
        self._tracker.end_run(run_id, status)

    def flush(self) -> None:
        """Send what is held back; wait for this tracker's queued writes; raise the first that failed."""
        if self._pending or self._metrics:
            self._send({})
        self._writer.flush()
        if self._start_error is not None and not self._start_error_seen:
            self._raise_start_error()

    def _raise_start_error(self) -> None:
        assert self._start_error is not None
        self._start_error_seen = True
        raise self._start_error

    def _submit(self, write: Callable[[str], Any]) -> None:
        """``write(run_id)`` on the writer thread, unless the run could not start."""

        def call() -> None:
            if self._run_id is not None:
                write(self._run_id)

        self._writer.submit(call)

    def _send(self, tags: Mapping[str, Any]) -> None:
        """The held metrics with the pending params; beyond one batch's limits, batches of their own."""
        self._sent_at = time.monotonic()
        batches: list[dict[str, list[Any]]] = []
        while len(self._pending) > MAX_PARAMS_PER_BATCH:
            batches.append({"params": self._pending[:MAX_PARAMS_PER_BATCH]})
            self._pending = self._pending[MAX_PARAMS_PER_BATCH:]
        while len(self._metrics) > MAX_METRICS_PER_BATCH:
            batches.append({"metrics": self._metrics[:MAX_METRICS_PER_BATCH]})
            self._metrics = self._metrics[MAX_METRICS_PER_BATCH:]
        batches.append({"metrics": self._metrics, "params": self._pending, "tags": list(tags.items())})
        self._pending, self._metrics = [], []
        for batch in batches:
            self._submit(functools.partial(self._log_batch, batch=batch))

    def _log_batch(self, run_id: str, batch: dict[str, Any]) -> None:
        """On the writer thread: MLflow's entities are made here, so that training never waits
        for MLflow's import."""
        self._tracker.client.log_batch(run_id, metrics=metrics_of(batch.get("metrics", [])),
                                       params=params_of(batch.get("params", [])),
                                       tags=tags_of(batch.get("tags", [])))  # fmt: skip


class Writer:
    """A queue of MLflow calls run in order on one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Callable[[], Any], bool]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Any], always: bool = False) -> None:
        """Queue ``fn()``; after a failure nobody has seen yet, skipped, unless ``always``."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mlflow-writer", daemon=True)
                self._thread.start()
        self._queue.put((fn, always))

    def flush(self) -> None:
        self._queue.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            call, always = self._queue.get()
            try:
                if self._error is None or always:  # after a failure, skip the rest until someone has seen it
                    call()
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that flushes
                self._error = exc
            finally:
                self._queue.task_done()
