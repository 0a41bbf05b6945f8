"""Character-level language modelling with a tiny decoder-only transformer on Python's docs or your text.

The search covers width, layers, attention heads, context length, learning rate, warmup and
dropout; the metric is validation cross-entropy per character (``val_perplexity`` is reported
too). Contexts shorter than the data windows score each window in independent chunks.

    study = make_study()                                  # Python's bundled documentation
    study = make_study(text_path="book.txt", context=128)
"""

from __future__ import annotations

from pathlib import Path

from studies._base import as_bool, fidelities
from studies.tinylm._data import Vocab, default_corpus, read_corpus, split_text, windows
from studies.tinylm._model import Block, CausalSelfAttention, TinyLM
from studies.tinylm._params import TinyLMParams, context_choices, suggest_params
from studies.tinylm._study import TinyLMStudy

__all__ = [
    "Block",
    "CausalSelfAttention",
    "TinyLM",
    "TinyLMParams",
    "TinyLMStudy",
    "Vocab",
    "context_choices",
    "default_corpus",
    "make_study",
    "read_corpus",
    "split_text",
    "suggest_params",
    "windows",
]


def make_study(
    text_path: str | Path | None = None,
    context: int = 64,
    seed: int = 0,
    max_chars: int = 50_000,
    batch_size: int = 32,
    tie_weights: bool = True,
    activation_checkpointing: bool = False,
    search_epochs: int = 3,
    full_epochs: int = 10,
    data_fraction: float = 1.0,
    precision: str = "auto",
) -> TinyLMStudy:
    """The character-level language-modelling study. Options may arrive as strings (from the command line).

    Args:
        text_path: A UTF-8 text file; default: Python's bundled documentation (``pydoc_data``).
        context: Window length of the data; the search tries it, half and a quarter of it.
        seed: Seeds the initial weights and training randomness.
        max_chars: Characters used from the start of the corpus.
        batch_size: Training windows per batch.
        tie_weights: Share the token embedding with the output head.
        activation_checkpointing: Recompute block activations in backward to save memory.
        search_epochs: Epochs per search trial.
        full_epochs: Epochs of the final (retrained) model.
        data_fraction: Fraction of the training windows each search trial uses.
        precision: Autocast: ``auto`` (bf16 on a GPU that has it, else none), ``no``, ``bf16``, ``fp16``.

    Raises:
        ValueError: ``context`` below 2, or ``max_chars`` too small for ``context``.
    """
    return TinyLMStudy(
        text_path=None if text_path is None else Path(text_path),
        context=int(context),
        max_chars=int(max_chars),
        batch_size=int(batch_size),
        tie_weights=as_bool("tie_weights", tie_weights),
        activation_checkpointing=as_bool("activation_checkpointing", activation_checkpointing),
        seed=int(seed),
        precision=str(precision),
        **fidelities(search_epochs, full_epochs, data_fraction),
    )
