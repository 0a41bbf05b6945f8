"""benchmarks/bench_search.py runs end to end on one tiny problem with one seed, in both modes.

The benchmark takes minutes; this only checks that it runs, compares what it says it compares and
writes what it says it writes. Its numbers are read in docs/search-strategy.md, never asserted.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_search.py"


def _run(*args: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, str(BENCH), *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_simulated_workers_on_the_surrogate(tmp_path):
    pytest.importorskip("onnxruntime")
    out = _run("simulate", "--tasks", "3945", "--workers", "1,4", "--seeds", "1", "--trials", "24",
               "--strategies", "default,script,random", "--out", str(tmp_path / "sim"), cwd=tmp_path)  # fmt: skip
    dehb = importlib.util.find_spec("dehb") is not None  # the DEHB baseline runs when dehb is installed
    for name in ("default", "script", "random", "top-k after 1 epoch", *(["dehb"] if dehb else [])):
        assert out.count(f"\n{name} ") == 2 + (name != "script"), out  # 1 and 4 workers; 4 against 1
    workers = out.split("ratio to 1 worker(s)")[1].split("\n\n")[0]
    assert [line.split()[:2] for line in workers.splitlines()[2:]] == [
        ["default", "4"], *([["dehb", "4"]] if dehb else []), ["random", "4"], ["top-k", "after"]
    ]  # fmt: skip
    # Per row, the FTE spent when the first trial completed, with 1 and with 4 workers: trials that
    # are not stopped before their first completes (no pruning before complete trials exist) complete
    # their first later in epochs with 4 workers training at once than with one.
    for line in workers.splitlines()[2:]:
        if line.startswith("dehb"):  # its asynchronous brackets can start a full-length job sooner
            continue
        one, four = float(line.split()[-3]), float(line.split()[-1])
        assert 0 < one <= four, line
    assert "lcbench-3945, 4 worker(s), 24 trials" in out and "rank@126" in out
    correlations = json.loads((tmp_path / "sim" / "rank_correlation.json").read_text())
    assert len(correlations["lcbench-3945"]) == 52
    assert (tmp_path / "sim" / "anytime.html").stat().st_size > 100_000  # plotly.js inlined


def test_the_real_service_against_the_sequential_script(tmp_path):
    out = _run("service", "--problem", "resmlp-digits", "--workers", "1", "--seeds", "1", "--trials", "3",
               "--strategies", "default,script", "--study-option", "search_epochs=2", "--out", str(tmp_path / "svc"),
               cwd=tmp_path)  # fmt: skip
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("default ", "script "))}
    assert set(rows) == {"default", "script"}
    assert rows["script"][3] == "1.000"  # the baseline's ratio to itself
    traces = json.loads((tmp_path / "svc" / "traces.json").read_text())
    assert sorted(t["strategy"] for t in traces) == ["default", "script"]
    assert all(len(t["events"]) == 3 for t in traces)  # three finished trials each, in the order they ended
