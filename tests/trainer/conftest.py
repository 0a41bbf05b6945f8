import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# `pytest` may run without the project installed; the helpers module sits next to the tests.
for path in (str(ROOT), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """The models here are tiny: a second intra-op thread gains nothing, and on a shared 2-core
    machine its spin-waits made single tests ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
