#!/usr/bin/env bash
# One nvidia-h200-x2 (or any two-GPU) call: does a GPU compute slower while
# the other GPU of its host computes too? The same one-GPU plan (GPT-Neo-1.3B,
# bf16, mbs 4, gas 8: examples/plans/h200x2-3d/neo1.3b-dp1.json) with
# planner exec --kernels: alone on GPU 0, on GPUs 0 and 1 at once (two
# independent processes: no NCCL, nothing shared but the host), alone on GPU
# 1, and at once again; nvidia-smi logs clocks, power and temperature.
# Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_x2_neighbor.sh
. "$(dirname "$0")/device_lib.sh"
build_target planner
nvidia-smi --query-gpu=index,timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 >"$R/clocks.csv" 2>&1 &
SMI=$!
P=examples/plans/h200x2-3d/neo1.3b-dp1.json
ex() { CUDA_VISIBLE_DEVICES=$1 timeout 120 ./build-dev/planner exec $P --steps ${STEPS:-8} --warmup 3 --kernels -o "$R/$2.json" >"$R/$2.log" 2>&1; }
t() { echo "== $1 $(date +%s.%N)"; }
t alone0; ex 0 alone0
t both1; ex 0 both1-gpu0 & A=$!; ex 1 both1-gpu1; wait $A
t alone1; ex 1 alone1
t both2; ex 0 both2-gpu0 & A=$!; ex 1 both2-gpu1; wait $A
t end
kill $SMI
python3 - "$R" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    m = json.load(open(f))["measurement"]
    k = m.get("kernels", {}).get("by_class", {})
    print(f"{os.path.basename(f):18s} step {m['step_seconds']['mean']:.4f} s (median {m['step_seconds']['median']:.4f})  "
          f"gemm {k.get('gemm_seconds', 0):.4f}  attention {k.get('attention_seconds', 0):.4f}  memory-bound {k.get('memory_bound_seconds', 0):.4f}")
PY
