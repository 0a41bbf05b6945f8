"""Residual MLP classifier on tabular data: digits, synthetic blobs or your CSV/Parquet file.

The reference study: every other study follows its shape. Options (``make_study``):
``data`` (digits | synthetic | file), ``rows``/``features``/``classes`` for synthetic data,
``path``/``target`` for a file, ``seed``, ``folds`` (k-fold cross-validation), ``search_epochs``,
``full_epochs``, ``data_fraction``.
"""

from studies.resmlp._model import ResidualBlock, ResMLP
from studies.resmlp._study import ResMLPParams, ResMLPStudy, make_study

__all__ = ["ResMLP", "ResMLPParams", "ResMLPStudy", "ResidualBlock", "make_study"]
