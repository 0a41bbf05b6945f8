"""benchmarks/lcbench.py: the YAHPO LCBench surrogate reader gives sane, yahpo-identical numbers.

The full comparison against yahpo-gym lives in benchmarks/check_lcbench.py (it needs yahpo's own
venv); here only what is certain: one value measured from yahpo, shapes, scales, and input checks.
"""

from __future__ import annotations

import math
import random

import pytest

pytest.importorskip("onnxruntime")

from benchmarks.lcbench import MAX_EPOCH, OUTPUTS, SPACE, TASKS, LCBench  # noqa: E402

# config_space.json's default configuration.
DEFAULT = {
    "batch_size": 91,
    "learning_rate": 0.0031622777,
    "momentum": 0.545,
    "weight_decay": 0.050005,
    "num_layers": 3,
    "max_units": 256,
    "max_dropout": 0.5,
}


@pytest.fixture(scope="module")
def bench() -> LCBench:
    try:
        return LCBench()
    except FileNotFoundError as exc:
        pytest.skip(f"LCBench data not here: {exc}")


def _random_config(rng: random.Random) -> dict[str, float]:
    config: dict[str, float] = {}
    for name, p in SPACE.items():
        v = math.exp(rng.uniform(math.log(p.low), math.log(p.high))) if p.log else rng.uniform(p.low, p.high)
        config[name] = int(min(max(round(v), p.low), p.high)) if p.integer else v
    return config


def test_matches_yahpo_reference_value(bench: LCBench) -> None:
    # From yahpo-gym 1.0.2's BenchmarkSet("lcbench").objective_function({**DEFAULT,
    # "OpenML_task_id": "3945", "epoch": 10}), one row per call (float32 values, printed with repr).
    # The tolerance only allows for another CPU's float32 GEMM kernel; on the machine that measured
    # it, benchmarks/check_lcbench.py found the two identical.
    (y,) = bench.query("3945", DEFAULT, [10])
    assert y["time"] == pytest.approx(68.12142944335938, rel=1e-5)
    assert y["val_accuracy"] == pytest.approx(90.6973648071289, rel=1e-5)
    assert y["val_cross_entropy"] == pytest.approx(0.45688310265541077, rel=1e-5)
    assert y["val_balanced_accuracy"] == pytest.approx(0.647157609462738, rel=1e-5)


def test_default_curve_time_grows_and_accuracy_improves(bench: LCBench) -> None:
    curve = bench.query("3945", DEFAULT, range(1, MAX_EPOCH + 1))
    times = [y["time"] for y in curve]
    assert all(a < b for a, b in zip(times, times[1:], strict=False))  # true for this config, not for all
    assert curve[-1]["val_accuracy"] > curve[0]["val_accuracy"]
    assert curve[-1]["val_cross_entropy"] < curve[0]["val_cross_entropy"]


def test_random_configs_every_task_sane_scales(bench: LCBench) -> None:
    rng = random.Random(0)
    for task in TASKS:
        for _ in range(3):
            curve = bench.query(task, _random_config(rng), range(1, MAX_EPOCH + 1))
            assert len(curve) == MAX_EPOCH
            for y in curve:
                assert set(y) == set(OUTPUTS)
                assert all(math.isfinite(v) for v in y.values())
                assert y["time"] > 0
                assert 0 <= y["val_accuracy"] <= 100  # percent
                assert 0 <= y["val_balanced_accuracy"] <= 1  # fraction
                assert 0 <= y["test_balanced_accuracy"] <= 1
                assert y["val_cross_entropy"] >= 0 and y["test_cross_entropy"] >= 0
            # `time` can dip between neighbouring epochs (often epoch 1 > epoch 2), but not over the whole run.
            assert curve[-1]["time"] > curve[0]["time"]


def test_rejects_what_yahpo_would(bench: LCBench) -> None:
    assert bench.query("3945", DEFAULT, []) == []
    with pytest.raises(ValueError, match="task"):
        bench.query("167083", DEFAULT, [1])  # in encoding.json, not in the space
    with pytest.raises(ValueError, match="keys"):
        bench.query("3945", {k: v for k, v in DEFAULT.items() if k != "momentum"}, [1])
    with pytest.raises(ValueError, match="batch_size"):
        bench.query("3945", {**DEFAULT, "batch_size": 91.5}, [1])
    with pytest.raises(ValueError, match="learning_rate"):
        bench.query("3945", {**DEFAULT, "learning_rate": 1e-4}, [1])  # below exp(log(1e-4))
    with pytest.raises(ValueError, match="epochs"):
        bench.query("3945", DEFAULT, [0, 53])
