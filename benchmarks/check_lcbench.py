"""Compare benchmarks/lcbench.py with yahpo-gym 1.0.2's own `BenchmarkSet("lcbench").objective_function`.

Why: lcbench.py re-implements yahpo's input encoding from its source; this is the proof that it
returns the same numbers. yahpo-gym pins ConfigSpace 0.6.1 and numpy<2, so it runs in a throwaway
venv outside the repo, never in the product's:

    python3 -m venv /tmp/yahpo-venv && /tmp/yahpo-venv/bin/pip install yahpo-gym==1.0.2 onnxruntime
    /tmp/yahpo-venv/bin/python benchmarks/check_lcbench.py [--configs 50] [--seed 0] [--data DIR]

yahpo is pointed at a temporary root holding `lcbench -> DIR` through a temporary YAHPO_LOCAL_CONFIG
file, so ~/.config/yahpo_gym is left alone. Exits 1 if any output differs by more than --tol from
yahpo fed the same batch of rows. onnxruntime's float32 GEMM takes another kernel path for many
rows than for a few, so a 52-epoch query and yahpo called once per epoch differ by float32 noise
(relative ~1e-5, up to ~1e-3 for small `time`); that column is printed, not gated.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import math
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
EPOCHS = [1, 10, 52]


def load_reader() -> types.ModuleType:
    """Import lcbench.py by path: the yahpo venv has no hpsearch installed."""
    spec = importlib.util.spec_from_file_location("lcbench", HERE / "lcbench.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["lcbench"] = module  # dataclasses look the module up while the class is built
    spec.loader.exec_module(module)
    return module


def main() -> int:
    lcb = load_reader()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=Path(os.environ.get(lcb.ENV_DIR) or lcb.DEFAULT_DIR))
    parser.add_argument("--tol", type=float, default=0.0)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="yahpo-check-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    (tmp / "lcbench").symlink_to(args.data.resolve())
    os.environ["YAHPO_LOCAL_CONFIG"] = str(tmp / "settings.yaml")  # read when yahpo_gym is imported
    from yahpo_gym import benchmark_set, local_config

    local_config.init_config()
    local_config.set_data_path(str(tmp))
    bench = benchmark_set.BenchmarkSet("lcbench")
    reader = lcb.LCBench(args.data)

    # Random configs from yahpo's own ConfigSpace (so log/int handling is ConfigSpace's), plus the corners.
    space = bench.get_opt_space(drop_fidelity_params=True, seed=args.seed)
    configs = [c.get_dictionary() for c in space.sample_configuration(args.configs)]
    configs += [{k: p.low for k, p in lcb.SPACE.items()}, {k: p.high for k, p in lcb.SPACE.items()}]
    for c in configs[-2:]:
        for k, p in lcb.SPACE.items():
            c[k] = int(c[k]) if p.integer else c[k]

    same = {name: 0.0 for name in lcb.OUTPUTS}  # vs yahpo fed the same rows: must be 0
    curve = {name: 0.0 for name in lcb.OUTPUTS}  # 52-epoch query vs yahpo one epoch per call: float32 noise
    n = 0
    for task in lcb.TASKS:
        bench.set_instance(task)
        for i, cfg in enumerate(configs):
            cfg = {k: v for k, v in cfg.items() if k in lcb.SPACE}
            # yahpo's check runs before set_instance's constant is applied, so the task goes in the dict too.
            points = [{**cfg, "OpenML_task_id": task, "epoch": e} for e in EPOCHS]
            ours = reader.query(task, cfg, EPOCHS)
            # yahpo one epoch per call (as ORIGIN.md uses it) and batched, multi- and single-threaded.
            singles = [bench.objective_function(p)[0] for p in points]
            batched = bench.objective_function(points, multithread=False)
            _diff(same, ours, singles, lcb.OUTPUTS)
            _diff(same, ours, batched, lcb.OUTPUTS)
            n += len(EPOCHS)
            full = reader.query(task, cfg, range(1, 53))
            _diff(same, full, bench.objective_function([{**points[0], "epoch": e} for e in range(1, 53)]), lcb.OUTPUTS)
            if i < 3:
                _diff(curve, full, [bench.objective_function({**points[0], "epoch": e})[0] for e in range(1, 53)],
                      lcb.OUTPUTS)  # fmt: skip

    print(f"{n} (task, config, epoch) points: {len(lcb.TASKS)} tasks x {len(configs)} configs x epochs {EPOCHS},")
    print("plus every config's 52-epoch curve (3 configs per task also one epoch per yahpo call)")
    print(f"  {'max |ours - yahpo|':24s} {'same batch':>12s} {'52 vs 1-row':>12s}")
    for name in lcb.OUTPUTS:
        print(f"  {name:24s} {same[name]:12.3g} {curve[name]:12.3g}")
    return 0 if max(same.values()) <= args.tol else 1


def _diff(worst: dict[str, float], ours: list[dict[str, float]], theirs: list[dict], names: tuple[str, ...]) -> None:
    """Fold max |ours - theirs| per output into `worst`, checking keys and finiteness on the way."""
    assert len(ours) == len(theirs)
    for mine, ref in zip(ours, theirs, strict=True):
        assert set(mine) == set(names) == set(ref), (sorted(mine), sorted(ref))
        for name in names:
            assert math.isfinite(mine[name]), (name, mine)
            worst[name] = max(worst[name], abs(mine[name] - float(ref[name])))


if __name__ == "__main__":
    sys.exit(main())
