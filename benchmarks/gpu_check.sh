#!/usr/bin/env bash
# One run on a machine with a CUDA GPU (the `device` tool; docs/results/training-speed.md): the tests marked `gpu`,
# then the
# generation benchmark on the GPU and on two of that machine's CPU cores. Uses the machine's own python3 and torch
# (PYTHONPATH=src, no install; nothing can be downloaded there). Each part has its own time limit, so one that hangs
# leaves the others' results. Results go to $OUT (default ./gpu-check).
set -u
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)"
  echo "AMX: $(grep -o -m1 amx_bf16 /proc/cpuinfo || echo no)"
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py > "$OUT/test-gpu.log" 2>&1
echo "test-gpu exit $?"; tail -3 "$OUT/test-gpu.log"
timeout "${GPU_BENCH_LIMIT:-150}" python3 benchmarks/generate_speed.py --device cuda --dtypes bf16 fp32 \
  --prompt-lengths 16 64 --rounds 3 --no-uncached --out "$OUT/generate-cuda" > "$OUT/generate-cuda.stdout" 2>&1
echo "generate cuda exit $?"; tail -14 "$OUT/generate-cuda.stdout"
OMP_NUM_THREADS=2 timeout "${CPU_BENCH_LIMIT:-200}" taskset -c 0,1 python3 benchmarks/generate_speed.py --threads 2 \
  --dtypes fp32 bf16 --prompt-lengths 16 64 --rounds 3 --no-uncached --out "$OUT/generate-cpu" > "$OUT/generate-cpu.stdout" 2>&1
echo "generate cpu exit $?"; tail -14 "$OUT/generate-cpu.stdout"
