#!/bin/bash
# The checks to run wherever a CUDA GPU is lent, in one go (about 3-4 minutes on an H200):
# the gpu-marked tests, benchmarks/bench_trainer.py on CUDA at the default shape (no, bf16) and at a
# large one (bf16, fp16), and a short `search start` of the resmlp study in bf16 and in fp16 with two
# workers on the GPU, then `search trials` and `search best`; then the same study in bf16 with the
# schedulers that pause, resume and copy trials on the GPU (`--pruner asha`, `--pruner pbt`). Logs go
# to $OUT (default /tmp/gpu-checks).
#
#   bash benchmarks/gpu_checks.sh            # everything (about 5-6 minutes on an H200)
#   SECTIONS=schedulers bash benchmarks/gpu_checks.sh   # one part: tests, bench, search, schedulers, sampler
#
# `sampler` (not in the default set) times 40 trials of resmlp in bf16 with 4 workers on the GPU under
# --sampler auto (the Gaussian process there) and under --sampler tpe, one run each.
#
# Where the machine cannot install the project, wheels of what its Python lacks may sit in .whl/
# (optuna, mlflow, sqlalchemy, ...): they are installed into /tmp/site first.
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
T0=$(date +%s)
SECTIONS=${SECTIONS:-tests bench search schedulers}
wants() { [[ " $SECTIONS " == *" $1 "* ]]; }
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { echo "installing .whl/ failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import sys, torch, optuna, mlflow, accelerate
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda,
      'optuna', optuna.__version__, 'mlflow', mlflow.__version__, 'accelerate', accelerate.__version__)"
} 2>&1 | tee "$OUT/setup.log"
wants tests && {
echo "== gpu tests"
timeout 150 python3 -m pytest -m gpu -n 0 -p no:cacheprovider -o addopts="" --timeout 120 -q -rs tests/trainer/test_gpu.py \
  2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
}
wants bench && {
echo "== bench_trainer, default shape (batch 64, width 256): no, bf16"
for p in no bf16; do
  timeout 100 python3 benchmarks/bench_trainer.py --device cuda --mixed-precision $p --epochs 2 --repeats 3 \
    2>&1 | tee "$OUT/bench_small_$p.log" | tail -3
done
echo "== bench_trainer, batch 1024, width 2048: bf16, fp16"
for p in bf16 fp16; do
  timeout 100 python3 benchmarks/bench_trainer.py --device cuda --mixed-precision $p --batch 1024 --width 2048 \
    --epochs 2 --repeats 3 2>&1 | tee "$OUT/bench_large_$p.log" | tail -3
done
}
wants search && {
for p in bf16 fp16; do
  echo "== search start, resmlp, precision=$p, 2 workers on the GPU"
  S=$(date +%s)
  timeout 150 python3 -m search start --study resmlp --trials 8 --workers 2 --workers-per-gpu 2 \
    --study-option precision=$p --project-dir /tmp/gpu-checks-$p 2>&1 | tee "$OUT/search_$p.log" | tail -4
  echo "exit ${PIPESTATUS[0]}, $(( $(date +%s) - S )) s"
  python3 -m search trials --study resmlp --project-dir /tmp/gpu-checks-$p 2>&1 | tail -10
  python3 -m search best --study resmlp --project-dir /tmp/gpu-checks-$p 2>&1 | tail -4
done
}
wants schedulers && for s in asha pbt; do
  echo "== search start, resmlp, bf16, --pruner $s, 2 workers on the GPU"
  S=$(date +%s)
  timeout 200 python3 -m search start --study resmlp --trials 12 --workers 2 --workers-per-gpu 2 --pruner $s \
    --study-option precision=bf16 --project-dir /tmp/gpu-checks-$s 2>&1 | tee "$OUT/search_$s.log" | tail -4
  echo "exit ${PIPESTATUS[0]}, $(( $(date +%s) - S )) s"
  python3 -m search trials --study resmlp --project-dir /tmp/gpu-checks-$s 2>&1 | tee "$OUT/trials_$s.log" | tail -16
  python3 -m search best --study resmlp --project-dir /tmp/gpu-checks-$s 2>&1 | tail -4
done
wants sampler && for s in auto tpe; do
  echo "== search start, resmlp, bf16, --sampler $s, 40 trials, 4 workers on the GPU"
  S=$(date +%s)
  timeout 150 python3 -m search start --study resmlp --trials 40 --workers 4 --workers-per-gpu 4 --sampler $s \
    --study-option precision=bf16 --no-retrain --project-dir /tmp/gpu-checks-sampler-$s 2>&1 \
    | tee "$OUT/search_sampler_$s.log" | grep -E "sampler:|trials finished|stopped early"
  echo "exit ${PIPESTATUS[0]}, $(( $(date +%s) - S )) s"
  python3 -m search best --study resmlp --project-dir /tmp/gpu-checks-sampler-$s 2>&1 | head -3
done
echo "== total $(( $(date +%s) - T0 )) s"
