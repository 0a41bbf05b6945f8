"""Opening a storage without Optuna's schema-version bookkeeping, which it makes whether asked or not."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_VERSIONS_LOCK = threading.Lock()


@contextmanager
def versions_on_demand() -> Iterator[None]:
    """While it is held, an ``RDBStorage`` opened makes its schema-version manager on first use.

    Optuna makes it as a storage opens, whether or not its compatibility check is skipped. Another
    thread opening a storage meanwhile (not through here) gets one made on demand too, which is
    then made as soon as its own check (if not skipped) asks for it: the same work, later.
    """
    from optuna.storages._rdb import storage as rdb

    with _VERSIONS_LOCK:  # held while patched: a second opener must read the real one
        make = getattr(rdb, "_VersionManager", None)
        if make is None:  # another Optuna: its storage opens as it does (the checks stay skipped)
            yield
            return
        rdb._VersionManager = lambda *args: _VersionsOnDemand(make, args)  # type: ignore[assignment,misc]
        try:
            yield
        finally:
            rdb._VersionManager = make  # type: ignore[misc]


class _VersionsOnDemand:
    """Optuna's ``_VersionManager`` for a storage, made by the first attribute read (an upgrade or
    a version query: none of a worker's calls)."""

    def __init__(self, make: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._make, self._args, self._made = make, args, None

    def __getattr__(self, name: str) -> Any:
        if self._made is None:
            self._made = self._make(*self._args)
        return getattr(self._made, name)
