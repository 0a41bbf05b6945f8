"""benchmarks/bench_search.py runs end to end on one tiny problem with one seed, in both modes.

The benchmark takes minutes; this only checks that it runs, compares what it says it compares and
writes what it says it writes. Its numbers are read in docs/search-strategy.md and docs/experiments/, never asserted.
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


@pytest.mark.slow
def test_simulated_workers_on_the_surrogate(tmp_path):
    pytest.importorskip("onnxruntime")
    out = _run("simulate", "--tasks", "3945", "--workers", "1,8", "--seeds", "1", "--trials", "24",
               "--strategies", "default,script,random", "--out", str(tmp_path / "sim"), cwd=tmp_path)  # fmt: skip
    dehb = importlib.util.find_spec("dehb") is not None  # the DEHB baseline runs when dehb is installed
    for name in ("default", "script", "random", "top-k after 1 epoch", *(["dehb"] if dehb else [])):
        assert out.count(f"\n{name} ") == 2 + (name != "script"), out  # 1 and 8 workers; 8 against 1
    workers = out.split("ratio to 1 worker(s)")[1].split("\n\n")[0]
    assert [line.split()[:2] for line in workers.splitlines()[2:]] == [
        ["default", "8"], *([["dehb", "8"]] if dehb else []), ["random", "8"], ["top-k", "after"]
    ]  # fmt: skip
    # Per row, the FTE spent when the first trial completed, with 1 and with 8 workers: trials that
    # are not stopped before their first completes (no pruning before complete trials exist) complete
    # their first later in epochs with 8 workers training at once than with one. (8, not 4: the
    # default's Gaussian process beside 3 running trials would make this test minutes longer.)
    for line in workers.splitlines()[2:]:
        one, eight = float(line.split()[-3]), float(line.split()[-1])
        assert one > 0 and eight > 0, line
        # Not dehb (its asynchronous brackets can start a full-length job sooner) nor the default
        # (--patience ends a stalled trial as complete, which with 8 at once can come before 1 FTE).
        if not line.startswith(("dehb", "default")):
            assert one <= eight, line
    assert "lcbench-3945, 8 worker(s), 24 trials" in out and "rank@126" in out
    paired = out.split("paired with default")[1].split("\n\n")[0].splitlines()[2:]
    assert [line.split()[:2] for line in paired if line.strip()] == [
        *([["dehb", "1"], ["dehb", "8"]] if dehb else []), ["random", "1"], ["random", "8"],
        ["script", "1"], ["script", "8"], ["top-k", "after"], ["top-k", "after"],
    ]  # fmt: skip
    assert "@126 FTE" in out.split("paired with default")[1] and "@24 trials" in out.split("paired with default")[2]
    correlations = json.loads((tmp_path / "sim" / "rank_correlation.json").read_text())
    assert len(correlations["lcbench-3945"]) == 52
    assert (tmp_path / "sim" / "anytime.html").stat().st_size > 100_000  # plotly.js inlined


@pytest.mark.slow
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
    assert "paired with default" in out and "@3 trials" in out


def test_the_paired_comparison_counts_wins_per_seed_and_says_how_likely_chance_is():
    from benchmarks.bench_search import paired_table, sign_test
    from benchmarks.search_sim import Event, Trace

    assert sign_test(0, 0) == 1.0 and sign_test(3, 3) == 1.0
    assert sign_test(5, 0) == sign_test(0, 5) == 2 / 32  # all five pairs one way: 1/16 by chance
    assert abs(sign_test(9, 1) - 22 / 1024) < 1e-12  # 2 * (1 + 10) / 2**10
    assert sign_test(10, 0) < 0.05 < sign_test(4, 1)

    def trace(strategy: str, seed: int, best: float, problem: str = "t1") -> Trace:
        return Trace(strategy, problem, 8, seed, [Event(1.0, 52 * 10, 5, best * 2), Event(2.0, 52 * 60, 9, best)])

    traces = [trace("default", s, 1.0) for s in range(4)] + [trace("other", s, 0.5) for s in range(3)]
    traces += [trace("other", 3, 1.0), trace("other", 9, 0.1)]  # a tie; a seed the default did not run
    table = paired_table(traces)
    row = next(line for line in table.splitlines() if line.split()[:1] == ["other"])
    # At 20 FTE (1040 epochs) only the first events count: 1.0 against 2.0 on seeds 0-2, then a tie.
    assert row.split()[:2] == ["other", "8"] and row.count("3-0 (p 0.25)") == 3, table
    at_trials = paired_table(traces, at_trials=5)
    assert "@5 trials" in at_trials and "3-0 (p 0.25)" in at_trials


def test_a_sampler_pruner_spec_takes_the_default_patience_or_its_own():
    from benchmarks.bench_search import spec_strategy
    from search.settings import SearchSettings

    assert spec_strategy("tpe+median").patience == SearchSettings().patience
    assert (spec_strategy("gp+none+patience=7").sampler, spec_strategy("gp+none+patience=7").patience) == ("gp", "7")
    assert spec_strategy("tpe+median+patience=OFF").patience == "off"
    with pytest.raises(SystemExit, match="expected SAMPLER\\+PRUNER"):
        spec_strategy("tpe+median+liar=1")


def _bench_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_search_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_baselines_are_what_users_copy():
    """`script`: TPESampler(seed=s) + MedianPruner(n_startup_trials=5, n_warmup_steps=3), one process;
    `script-eager`: MedianPruner() (prunes from epoch 1); `optuna-parallel`: the script on W workers."""
    bench = _bench_module()
    problem = type("P", (), {"name": "p"})()
    script, eager = bench._script_study(problem, 3), bench._eager_script_study(problem, 3)
    assert (script.pruner._n_startup_trials, script.pruner._n_warmup_steps) == (5, 3)
    assert (eager.pruner._n_startup_trials, eager.pruner._n_warmup_steps) == (5, 0)
    assert script.sampler._constant_liar  # Optuna 5's default: the parallel mode lies about running trials
    found = bench.strategies()
    assert found["script"].sequential and found["script-eager"].sequential
    assert not found["optuna-parallel"].sequential and found["optuna-parallel"].build is bench._script_study


@pytest.mark.slow
def test_optuna_parallel_mode_runs_the_script_in_w_processes_on_one_storage_within_the_budget():
    bench = _bench_module()
    sleep = str(ROOT / "benchmarks" / "studies" / "sleep_study.py")
    trials = bench._run_script(sleep, {"epoch_seconds": 0.05, "epochs": 2}, seed=0, trials=6, processes=2)
    assert sorted(t["number"] for t in trials) == list(range(6))
    assert all(t["state"] in ("COMPLETE", "PRUNED") for t in trials)
    # each process trains on its share of the cores, as a service worker does, not on all of them
    from search.execution._machine import worker_threads

    assert {t["threads"] for t in trials} == {int(worker_threads(2, []))}


@pytest.mark.slow
def test_the_speed_up_table_reads_the_traces_it_writes(tmp_path):
    pytest.importorskip("onnxruntime")
    out = _run("speedup", "--tasks", "3945", "--workers", "4", "--seeds", "2", "--trials", "16", "--jobs", "2",
               "--strategies", "default,tpe+asha:min=3", "--out", str(tmp_path / "s"), cwd=tmp_path)  # fmt: skip
    traces = json.loads((tmp_path / "s" / "traces.json").read_text())
    assert sorted((t["strategy"], t["workers"], t["seed"]) for t in traces) == [
        ("default", 4, 0), ("default", 4, 1), ("script", 1, 0), ("script", 1, 1),
        ("tpe+asha:min=3", 4, 0), ("tpe+asha:min=3", 4, 1),
    ]  # fmt: skip
    for t in traces:
        if t["strategy"] == "script":
            continue
        ref = next(s for s in traces if s["strategy"] == "script" and s["seed"] == t["seed"])
        target = ref["events"][-1]["best"]
        t1 = next(e["seconds"] for e in ref["events"] if e["best"] <= target)
        tw = next((e["seconds"] for e in t["events"] if e["best"] <= target), None)
        row = next(x for x in out.splitlines() if x.startswith("lcbench-3945") and f" {t['strategy']} " in x)
        assert row.split()[3 + t["seed"]] == ("never" if tw is None else f"{t1 / tw:.2f}"), row
    assert "over all tasks and seeds" in out
    again = _run("speedup", "--read", str(tmp_path / "s" / "traces.json"), cwd=tmp_path)
    assert again.strip() == (tmp_path / "s" / "table.txt").read_text().strip()  # one table over saved runs


@pytest.mark.slow
def test_first_seed_runs_the_later_seeds_alone_and_draws_them_as_a_longer_run_does(tmp_path):
    """``--first-seed 1 --seeds 1`` runs seed 1 only, exactly as ``--seeds 2`` runs it (a record can add seeds)."""
    pytest.importorskip("onnxruntime")
    common = ("simulate", "--tasks", "3945", "--workers", "2", "--trials", "12", "--no-dehb", "--strategies", "script")
    _run(*common, "--seeds", "2", "--out", str(tmp_path / "all"), cwd=tmp_path)
    _run(*common, "--seeds", "1", "--first-seed", "1", "--out", str(tmp_path / "late"), cwd=tmp_path)
    every = json.loads((tmp_path / "all" / "traces.json").read_text())
    late = json.loads((tmp_path / "late" / "traces.json").read_text())
    assert {t["seed"] for t in every} == {0, 1} and {t["seed"] for t in late} == {1}
    script = [t["events"] for t in every if t["seed"] == 1 and t["strategy"] == "script"]
    assert script == [t["events"] for t in late if t["strategy"] == "script"]
    proc = subprocess.run([sys.executable, str(BENCH), *common, "--first-seed", "-1"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--first-seed must be at least 0" in proc.stderr
