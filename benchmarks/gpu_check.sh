#!/usr/bin/env bash
# The GPU checks, as one command for a lent GPU machine (the `device` tool), from the repository root:
#   bash benchmarks/gpu_check.sh          # results in $OUT (or ./gpu_check_out)
# The machine has torch but not every package: wheels for the rest are carried in .whl/ (ignored by git;
# `pip download --only-binary=:all: --python-version 3.12 -d .whl sqlalchemy greenlet`).
# 1. the device tests on CUDA (tests/test_devices_smoke.py names its device; the rest of the suite pins
#    the CPU), 2. every cell's training step on CUDA against PyTorch's kernels (benchmarks/cells.py),
# 3. what the diagnostics and the store cost on CUDA (benchmarks/training.py). 4. where a CUDA step waits for the GPU
#    (benchmarks/gpu_syncs.py).
set -u
OUT=${OUT:-gpu_check_out}; mkdir -p "$OUT"
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONDONTWRITEBYTECODE=1
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
ls .whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps .whl/sqlalchemy*.whl .whl/greenlet*.whl 2>&1 | tail -1
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs ${TESTS:-tests/test_devices_smoke.py tests/test_devices.py \
    tests/test_device_steps.py} > "$OUT/tests.txt" 2>&1; echo "tests rc=$?" | tee -a "$OUT/tests.txt"
grep -E "^(FAILED|ERROR)|^E  |passed|failed" "$OUT/tests.txt" | tail -25
timeout 90 python3 benchmarks/gpu_syncs.py > "$OUT/syncs.txt" 2>&1; echo "syncs rc=$?"; head -60 "$OUT/syncs.txt"
timeout 150 python3 benchmarks/cells.py --device cuda --seq-lens 100 1000 --reps 3 > "$OUT/cells_cuda.txt" 2>&1
echo "cells rc=$?"; tail -40 "$OUT/cells_cuda.txt"
[ -n "${SKIP_TRAINING:-}" ] || timeout 100 python3 benchmarks/training.py --device cuda --steps 500 --reps 2 > "$OUT/training_cuda.txt" 2>&1
tail -12 "$OUT/training_cuda.txt"
