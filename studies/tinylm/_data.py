"""Character-level corpus, vocabulary and next-character windows for the tiny language model.

The character stream is split contiguously 80/10/10 into train/validation/test, so no window of
one split overlaps another. The vocabulary is fitted on the training text only; characters it
has not seen map to the unknown id 0.
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from studies._base import StudyData
from studies._errors import DataError
from trainer import LanguageModeling, TensorData

SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
UNKNOWN_ID = 0
STDLIB_MODULES = ("textwrap.py", "string.py", "shlex.py", "fnmatch.py", "glob.py", "heapq.py", "bisect.py")
"""Fallback corpus when ``pydoc_data`` is absent: small, long-lived standard-library modules."""


@dataclass(frozen=True)
class Vocab:
    """Characters of the training text; id 0 is reserved for characters outside it."""

    chars: str
    """Known characters in id order (``chars[i]`` has id ``i + 1``)."""

    @classmethod
    def fit(cls, text: str) -> Vocab:
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars) + 1

    def encode(self, text: str) -> torch.Tensor:
        """int64 ids of ``text``; unknown characters become :data:`UNKNOWN_ID`."""
        index = {char: i + 1 for i, char in enumerate(self.chars)}
        return torch.tensor([index.get(char, UNKNOWN_ID) for char in text], dtype=torch.int64)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """Text of ``ids``; the unknown id becomes U+FFFD."""
        table = "\ufffd" + self.chars
        return "".join(table[i] for i in torch.as_tensor(ids).tolist())


def default_corpus(max_chars: int) -> str:
    """English documentation that ships with Python: pydoc's topic pages, in sorted topic order."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions package pydoc_data separately
        return _stdlib_source(max_chars)
    return "\n\n".join(topics[key] for key in sorted(topics))[:max_chars]


def read_corpus(text_path: str | Path, max_chars: int) -> str:
    """The first ``max_chars`` characters of a UTF-8 text file.

    Raises:
        DataError: The file is missing, unreadable or not UTF-8 text.
    """
    path = Path(text_path)
    if not path.is_file():
        raise DataError(f"text file not found: {path}")
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.read(max_chars)
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: cannot read as UTF-8 text: {error}") from error


def split_text(text: str) -> tuple[str, str, str]:
    """Contiguous train/validation/test parts of ``text`` (80/10/10)."""
    train_end = int(len(text) * SPLIT_FRACTIONS[0])
    val_end = train_end + int(len(text) * SPLIT_FRACTIONS[1])
    return text[:train_end], text[train_end:val_end], text[val_end:]


def windows(ids: torch.Tensor, context: int, stride: int) -> TensorData:
    """Inputs ``ids[s : s + context]`` and next-character targets ``ids[s + 1 : s + context + 1]``."""
    chunks = ids.unfold(0, context + 1, stride)
    return TensorData(chunks[:, :-1].contiguous(), chunks[:, 1:].contiguous())


def text_study_data(text: str, context: int, source: str) -> StudyData:
    """Split ``text``, fit the vocabulary on the training part and cut each part into windows.

    Training windows overlap by half (more, varied samples per epoch); validation and test
    windows do not, so each of their characters is scored once.

    Raises:
        DataError: A split is too short for one window of ``context`` characters.
    """
    parts = split_text(text)
    shortest = min(len(part) for part in parts)
    if shortest <= context:
        raise DataError(
            f"{source}: {len(text)} characters give a split of {shortest}, too short for context "
            f"{context}; raise max_chars or lower context"
        )
    vocab = Vocab.fit(parts[0])
    train, val, test = (vocab.encode(part) for part in parts)
    return StudyData(
        train=windows(train, context, max(1, context // 2)),
        val=windows(val, context, context),
        test=windows(test, context, context),
        task=LanguageModeling(),
        raw_example=windows(train, context, context).x[:2].numpy(),
        info={
            "vocab_size": vocab.size,
            "vocab": vocab.chars,
            "context": context,
            "n_chars": len(text),
            "source": source,
        },
    )


def _stdlib_source(max_chars: int) -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [path.read_text(encoding="utf-8") for name in STDLIB_MODULES if (path := stdlib / name).is_file()]
    if not texts:
        raise DataError(f"no default corpus: neither pydoc_data nor {STDLIB_MODULES[0]} found in {stdlib}")
    return "\n".join(texts)[:max_chars]
