#!/usr/bin/env bash
# What reading W's singular values on the host (Note [Small SVDs] in stability/training/probes.py) changes on
# a CUDA card: benchmarks/training.py with HOST_SVD_SIZE = 0 (every SVD on the device, as before) and as it is,
# in one call, conditions alternating; then the device tests. For the `device` tool: bash benchmarks/svd_host.sh
set -u
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
ls .whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
run() {  # $1: HOST_SVD_SIZE or "" (as shipped)
  python3 - "$1" <<'PY'
import runpy, sys
import stability.training.probes as probes
if sys.argv[1]:
    probes.HOST_SVD_SIZE = int(sys.argv[1])
print(f"## HOST_SVD_SIZE = {probes.HOST_SVD_SIZE}", flush=True)
sys.argv = ["training.py", "--device", "cuda", "--steps", "500", "--reps", "1"]
runpy.run_path("benchmarks/training.py", run_name="__main__")
PY
}
for round in 1 2; do timeout 120 bash -c "$(declare -f run); run 0"; timeout 120 bash -c "$(declare -f run); run ''"; done
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_devices_smoke.py tests/test_device_steps.py 2>&1 | tail -3
