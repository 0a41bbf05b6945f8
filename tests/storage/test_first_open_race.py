"""Two processes opening one new local store at once (``search start`` beside ``search status`` in a
fresh project) both get it: the loser of the race to create Optuna's tables opens again."""

from __future__ import annotations

import multiprocessing as mp

import pytest


def _open(url: str, barrier: mp.synchronize.Barrier, results: mp.Queue) -> None:
    from storage import StorageError
    from storage._optuna import open_optuna_storage

    barrier.wait()
    try:
        open_optuna_storage(url)
        results.put("ok")
    except StorageError as exc:
        results.put(str(exc))


@pytest.mark.slow
def test_two_processes_creating_one_new_store_at_once_both_open_it(tmp_path):
    import optuna.storages  # noqa: F401 - imported before the fork, so both start the race together

    import storage._optuna  # noqa: F401

    ctx = mp.get_context("fork")
    failures = []
    for run in range(8):  # before the retry, 12 runs in 15 failed one of the two
        url = f"sqlite:///{tmp_path}/run{run}.db"
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(url, barrier, results)) for _ in range(2)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        failures += [said for said in (results.get(timeout=5) for _ in procs) if said != "ok"]
    assert failures == []
