"""Metrics sinks beyond the caller's own: TensorBoard event files, and several sinks as one.

TensorBoard shows each run's per-epoch scalars and, through its HParams plugin, a table of runs
by hyperparameters and metric. Writing needs the ``tensorboard`` package
(``pip install 'hpsearch[tensorboard]'``); nothing here imports it until a sink first writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer._errors import ConfigError
from trainer._hooks import MetricsSink

_HPARAM_TYPES = (bool, int, float, str)


class TensorBoardSink:
    """Writes every epoch's metrics as TensorBoard scalars under ``log_dir`` (one run per directory).

    ``hparams`` (set now or later, before the first epoch) appear in the HParams plugin with
    ``metrics`` as its columns; :meth:`close` ends the session with its status and final values.
    """

    def __init__(self, log_dir: Path, hparams: Mapping[str, Any] | None = None,
                 metrics: tuple[str, ...] = ("val_loss",)) -> None:  # fmt: skip
        self.log_dir = Path(log_dir)
        self.hparams = dict(hparams or {})
        self.metrics = metrics
        self._writer: Any = None
        self._last_step = 0

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        writer = self._open()
        for key, value in metrics.items():
            if key != "epoch":
                writer.add_scalar(key, float(value), global_step=step)
        self._last_step = step
        writer.flush()

    def close(self, status: str = "success", final: Mapping[str, float] | None = None) -> None:
        """End the run: ``final`` values as ``final/<name>`` scalars, ``status`` (success, failure,
        pruned, ...) as the HParams session's end. Nothing is written if no epoch was logged."""
        if self._writer is None:
            return
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        for key, value in (final or {}).items():
            self._writer.add_scalar(f"final/{key}", float(value), global_step=self._last_step)
        if self.hparams:
            *_, session_end = hparams_summary(_hparam_values(self.hparams), dict.fromkeys(self.metrics, 0.0))
            _set_status(session_end, status)
            self._writer.file_writer.add_summary(session_end)
        self._writer.close()
        self._writer = None

    def _open(self) -> Any:
        if self._writer is not None:
            return self._writer
        try:
            from torch.utils.tensorboard import SummaryWriter
            from torch.utils.tensorboard.summary import hparams as hparams_summary
        except ImportError as exc:
            raise ConfigError("TensorBoard logging needs the tensorboard package: pip install tensorboard") from exc
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=str(self.log_dir))
        if self.hparams:
            experiment, session_start, _ = hparams_summary(
                _hparam_values(self.hparams), dict.fromkeys(self.metrics, 0.0)
            )
            self._writer.file_writer.add_summary(experiment)
            self._writer.file_writer.add_summary(session_start)
        return self._writer


def _hparam_values(hparams: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """The plugin takes numbers, strings and booleans; anything else (None, tuples) is shown as text."""
    return {k: v if isinstance(v, _HPARAM_TYPES) else str(v) for k, v in hparams.items()}


def _set_status(session_end: Any, status: str) -> None:
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    content = plugin_data_pb2.HParamsPluginData()
    content.ParseFromString(session_end.value[0].metadata.plugin_data.content)
    content.session_end_info.status = {
        "success": api_pb2.STATUS_SUCCESS, "failure": api_pb2.STATUS_FAILURE, "running": api_pb2.STATUS_RUNNING,
    }.get(status, api_pb2.STATUS_UNKNOWN)  # fmt: skip
    session_end.value[0].metadata.plugin_data.content = content.SerializeToString()


class FanOut:
    """Several sinks as one: each epoch goes to every sink, in order."""

    def __init__(self, *sinks: MetricsSink) -> None:
        self.sinks = sinks

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)
