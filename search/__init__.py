"""hpsearch: hyperparameter search for PyTorch on Optuna, Accelerate and MLflow.

The ``search`` command line is :mod:`search.cli`. Heavy libraries are imported lazily so that
``search --help`` answers at once.
"""

__version__ = "0.1.0"
