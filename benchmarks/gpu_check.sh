#!/usr/bin/env bash
# The GPU checks, as one command for a lent GPU machine (the `device` tool), from the repository root:
#   bash benchmarks/gpu_check.sh          # results in $OUT (or ./gpu_check_out)
#   BUDGET_S=400 bash benchmarks/gpu_check.sh   # every step's limit is cut to what is left of 400 s
# The machine has torch but not every package: wheels for the rest are carried in .whl/ (ignored by git;
# `pip download --only-binary=:all: --python-version 3.12 -d .whl sqlalchemy greenlet optuna alembic mako colorlog`).
# In order of value (issue 32 first: its goal table, then its items 3 and 4), each under its own limit and the whole
# under BUDGET_S; what the budget cuts is the least valuable:
# 1. the device tests on CUDA (tests/test_devices_smoke.py names its device; the rest of the suite pins the CPU), the
#    graphed training step and the graphed readings against the eager ones for every capturable cell, alone and as the
#    Trainer trains them (tests/test_graphed_cuda.py), and a paper-scale shape timed graphed (test_paper_cost_graphed.py),
# 2. issue 32's goal table: the default run through stability.train_run graphed, eager, a bare cuDNN loop, one CPU
#    thread, and the graphed step alone, so what the readings add (benchmarks/graphed_run.py),
# 3. the same at hidden 128/512/1024 x T 100/1000 with the memory budget beside the peak (benchmarks/medium_models.py),
# 4. what each preset's paper scale costs there, eager and graphed (benchmarks/paper_scale.py), and the presets that fit
#    in what is left run to their verdicts (benchmarks/paper_fit.py, reproduce NAME --scale paper),
# 5. every cell's training step on CUDA against PyTorch's kernels, and captured as a CUDA graph (benchmarks/cells.py
#    --graphs), then the trainer's step (StaticStep) eager and graphed against a bare cuDNN loop (graphed_step.py),
# 6. what the diagnostics and the store cost on CUDA (benchmarks/training.py), and where that time goes (--profile),
# 7. start_run -> first stored row on CUDA, warm worker off and on, and the GPU memory an idle warm worker
#    holds (benchmarks/first_point.py --direct; the machine has no Streamlit or Chromium),
# 8. where a CUDA step waits for the GPU (benchmarks/gpu_syncs.py).
set -u
OUT=${OUT:-gpu_check_out}; mkdir -p "$OUT"
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
START=$(date +%s); BUDGET_S=${BUDGET_S:-480}
limit() { local left=$(( BUDGET_S - ($(date +%s) - START) )); [ "$left" -lt "$1" ] && echo $(( left > 5 ? left : 5 )) || echo "$1"; }
step() { local cap=$1 file=$2; shift 2; local t; t=$(limit "$cap"); echo "== $file (limit ${t} s, $(( $(date +%s) - START )) s in)";
         timeout "$t" "$@" > "$OUT/$file" 2>&1; echo "rc=$?" >> "$OUT/$file"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
ls .whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -1
step 200 tests.txt python3 -m pytest -q -p no:cacheprovider -rs ${TESTS:-tests/test_devices_smoke.py tests/test_devices.py \
    tests/test_device_steps.py tests/test_graphed_cuda.py tests/test_paper_cost_graphed.py}
grep -E "^(FAILED|ERROR)|^E  |passed|failed|rc=" "$OUT/tests.txt" | tail -25
# 100 s: the script stops starting runs at 85 s (rnn, lstm, spectral, sgornn, kru: graphed, eager, one CPU thread)
step 100 graphed_run_cuda.txt python3 benchmarks/graphed_run.py --device cuda
grep -E "^(#|\||done)|no CUDA|rc=" "$OUT/graphed_run_cuda.txt"
step 90 medium_cuda.txt python3 benchmarks/medium_models.py --device cuda
grep "^|" "$OUT/medium_cuda.txt"
# eager and graphed, 5 steps a shape; the JSON is rewritten after each preset, so a cut leaves what was timed
step 120 paper_scale_cuda.txt python3 benchmarks/paper_scale.py --device cuda --steps 5 --save "$OUT/paper_scale_cuda.json"
grep "^|" "$OUT/paper_scale_cuda.txt"
# 5b. the presets whose paper scale fits in what is left (KEEP_S, default 150, kept for what follows) run to their verdicts on CUDA,
#     smallest first, each saved as NAME.paper.json (for stability/presets/measured/; Note [Paper cost])
PAPER_S=$(( BUDGET_S - ($(date +%s) - START) - ${KEEP_S:-150} )); : > "$OUT/paper_fit.txt"
[ -f "$OUT/paper_scale_cuda.json" ] && python3 benchmarks/paper_fit.py --cost "$OUT/paper_scale_cuda.json" \
    --budget-s "$(( PAPER_S > 0 ? PAPER_S : 0 ))" > "$OUT/paper_fit.txt" 2> "$OUT/paper_fit_left_out.txt"
cat "$OUT/paper_fit.txt" "$OUT/paper_fit_left_out.txt" 2>/dev/null
while read -r name need <&3; do  # fd 3: a run reads nothing of the list from its stdin
  [ -n "$name" ] || continue
  left=$(( BUDGET_S - ($(date +%s) - START) - ${KEEP_S:-150} ))
  [ "$left" -ge "$need" ] || { echo "== $name: needs $need s, $left s left: not run"; continue; }
  step "$need" "paper_$name.txt" env STABILITY_DEVICE=cuda python3 -m stability reproduce "$name" --scale paper \
      --json --save "$OUT/$name.paper.json" --store "$OUT/paper.db"
  grep -E "rc=|saved the result" "$OUT/paper_$name.txt"
  [ -f "$OUT/$name.paper.json" ] && python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); m = d["measured"]
print(d["preset"], d["scale"], d["counts"], m["wall_seconds"], "s wall", m.get("devices"))' "$OUT/$name.paper.json"
done 3< "$OUT/paper_fit.txt"
step 150 cells_cuda.txt python3 benchmarks/cells.py --device cuda --seq-lens ${SEQ_LENS:-100} --reps 3 --graphs
tail -40 "$OUT/cells_cuda.txt"
step 90 graphed_cuda.txt python3 benchmarks/graphed_step.py --device cuda
tail -12 "$OUT/graphed_cuda.txt"
step 100 training_cuda.txt python3 benchmarks/training.py --device cuda --steps 500 --reps 2
tail -9 "$OUT/training_cuda.txt"
step 60 profile_cuda.txt python3 benchmarks/training.py --device cuda --steps 500 --profile 25
grep -E "^## |tottime|cumtime" "$OUT/profile_cuda.txt" | head -8
step 90 first_point_cuda.txt python3 benchmarks/first_point.py --direct --device cuda --tries 3
tail -10 "$OUT/first_point_cuda.txt"
step 60 syncs.txt python3 benchmarks/gpu_syncs.py
head -30 "$OUT/syncs.txt"
echo "done in $(( $(date +%s) - START )) s"
