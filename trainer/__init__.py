"""A pruning-aware training loop on HuggingFace Accelerate.

``trainer`` fits any ``nn.Module``. It knows nothing of Optuna or MLflow: callers observe
training through :class:`Hook` (may stop training) and :class:`MetricsSink` (records metrics).

    result = trainer.fit(model, train, val, task, config, infra=infra, hooks=[prune_hook], sink=logger)

``config`` (:class:`TrainConfig`) is what is trained, the hyperparameters; ``infra`` (:class:`Infra`)
is where and how: device, data workers, checkpoints. A resume may change the second, and of the first
only what ``infra.mutable`` names (lr, weight decay, dropout: population-based training).
"""

from trainer._checkpoint import load_checkpoint, load_model_weights
from trainer._config import MUTABLE_FIELDS, MixedPrecision, TrainConfig
from trainer._data import TensorData, TrainData
from trainer._deploy import Deployment, count_params, measure_deployment
from trainer._errors import CheckpointError, ConfigError, DivergenceError, TrainerError
from trainer._evaluate import evaluate
from trainer._hooks import CheckpointListener, EarlyStopping, Hook, MetricsSink
from trainer._infra import Infra
from trainer._loop import fit
from trainer._lr_find import LRRange, lr_range_test
from trainer._mutation import Mutation
from trainer._profile import Profile, profiled
from trainer._result import FitResult
from trainer._tasks import Classification, LanguageModeling, Regression, Task
from trainer._tensorboard import FanOut, TensorBoardSink

__all__ = [
    "MUTABLE_FIELDS",
    "CheckpointError",
    "CheckpointListener",
    "Classification",
    "ConfigError",
    "Deployment",
    "DivergenceError",
    "EarlyStopping",
    "FanOut",
    "FitResult",
    "Hook",
    "Infra",
    "LRRange",
    "LanguageModeling",
    "MetricsSink",
    "MixedPrecision",
    "Mutation",
    "Profile",
    "Regression",
    "Task",
    "TensorBoardSink",
    "TensorData",
    "TrainConfig",
    "TrainData",
    "TrainerError",
    "evaluate",
    "fit",
    "count_params",
    "load_checkpoint",
    "load_model_weights",
    "lr_range_test",
    "measure_deployment",
    "profiled",
]
