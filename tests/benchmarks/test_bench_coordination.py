"""benchmarks/bench_coordination.py and bench_large_study.py run at tiny scale against the real PostgreSQL.

The benchmarks take minutes; these only check that they still drive the product's claim, report,
heartbeat and finish code end to end, measure what they say they measure and leave no database
behind. Their numbers are read in docs/experiments/, never asserted.
"""

from __future__ import annotations

import pytest
import sqlalchemy

from benchmarks import bench_coordination, bench_large_study

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def bench_databases(admin_url: str) -> set[str]:
    engine = sqlalchemy.create_engine(admin_url, poolclass=sqlalchemy.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(sqlalchemy.text("SELECT datname FROM pg_database WHERE datname LIKE 'hp_coord_bench_%'"))
        names = {name for (name,) in rows}
    engine.dispose()
    return names


def test_four_workers_claim_report_and_finish_trials_on_the_real_server(pg_server: str, capsys) -> None:
    [result] = bench_coordination.main(["--workers", "4", "--trial-seconds", "0.2", "--epochs", "2",
                                        "--duration", "3", "--processes", "2", "--admin-url", pg_server])  # fmt: skip
    out = capsys.readouterr().out
    assert result.errors == []
    assert result.trials >= 4  # each worker finished trials through finish_ok
    assert result.claims_per_s > 0 and result.claim_p99 >= result.claim_p50 > 0
    assert result.hold_mean > 0  # the study lock was taken, and timed
    # Each worker holds its own pooled connections, never more than its pool allows.
    assert 4 <= result.connections <= 4 * bench_coordination.CONNECTIONS_PER_WORKER
    assert result.xacts >= 3 * result.trials  # claim, params and tell at least, each in its own transaction
    assert result.pg_cpu > 0
    assert "workers per study at trial length" in out and "10 min:" in out
    assert result.database not in bench_databases(pg_server)  # its database is dropped


def test_workers_that_would_not_fit_the_servers_connections_are_reported_not_started(pg_server: str, capsys) -> None:
    results = bench_coordination.main(["--workers", "100000", "--duration", "1", "--admin-url", pg_server])
    assert results == []
    assert "W=100000 not run: needs up to 200000 connections" in capsys.readouterr().out


def test_a_large_study_is_written_as_optuna_writes_it_and_timed(pg_server: str, capsys) -> None:
    results = bench_large_study.main(["--trials", "12,24", "--seed-trials", "4", "--epochs", "2", "--repeats", "1",
                                      "--skip", "trials,report", "--admin-url", pg_server,
                                      "--samplers", "tpe:window=0,tpe:window=10"])  # fmt: skip
    out = capsys.readouterr().out
    for figures in results.values():
        assert {"claim (join)", "claim (tpe:window=0)", "suggest (tpe:window=10)", "reaper", "status"} <= set(figures)
        assert all(0 < seconds < 120 for seconds in figures.values()), figures  # status ran (nan if it failed)
    assert "N=24: written" in out and "x2" in out
