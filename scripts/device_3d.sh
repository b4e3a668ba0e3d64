#!/usr/bin/env bash
# Device experiment for tensor, sequence and pipeline parallelism (issue 9), one
# call on the nvidia-h200-x2 machine (2 H200s, NVLink):
#   OUT=/some/dir PART=pp bash scripts/device_3d.sh   # pipeline schedules
#   OUT=/some/dir PART=tp bash scripts/device_3d.sh   # tensor (+ sequence) parallel
#   OUT=/some/dir PART=all bash scripts/device_3d.sh  # both
# Plans: examples/plans/h200x2-3d/ (written by `planner predict -o`, committed
# before the run). gpt-neo-1.3b (24 layers, hidden 2048, tied embeddings), seq
# 2048, bf16, global batch 32 sequences:
#   dp1   one GPU, mbs 4, gas 8 (the single-process reference: same batch)
#   dp2   dp=2 ZeRO-1, mbs 4, gas 4
#   pp:   pp=2 GPipe, 1F1B, interleaved 1F1B (vpp 2), mbs 4, gas 8; the 1F1B
#         plan also with --trace (predicted and measured timelines)
#   tp:   tp=2, tp=2 with sp, mbs 4, gas 8
# Every run's losses are compared with dp1's (bf16: same data, same initial
# values, different reduction orders). Results: $OUT/results-3d.tgz
# (*.exec.json, traces), $OUT/log-3d.txt, $OUT/summary-3d.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/out-3d}
PART=${PART:-all}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
mkdir -p "$OUT"
LOG="$OUT/log-3d.txt"
: >"$LOG"
say() { echo "== $*" | tee -a "$LOG"; }
D=examples/plans/h200x2-3d

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee -a "$LOG"
SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
say "build"
t0=$(date +%s)
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$SP/torch/share/cmake" -DNCCL_ROOT="$SP/nvidia/nccl" >>"$LOG" 2>&1 || { tail -30 "$LOG"; exit 1; }
cmake --build build-dev --target planner planner-exec >>"$LOG" 2>&1 || { grep -E "error|Error" "$LOG" | head -40; exit 1; }
say "built in $(( $(date +%s) - t0 )) s"
X=./build-dev/planner
run() {  # run NAME [extra exec options...]: planner exec of $D/NAME.json, result under $OUT
  local n=$1; shift
  say "planner exec $D/$n.json $*"
  local envs=()
  case $n in *dp1*) envs=(CUDA_VISIBLE_DEVICES=0) ;; esac
  env "${envs[@]}" timeout 300 $X exec "$D/$n.json" --steps "$STEPS" --warmup "$WARMUP" \
    -o "$OUT/$n.exec.json" "$@" 2>&1 | grep -v "warm-up step" | tee -a "$LOG"
}
run neo1.3b-dp1
run neo1.3b-dp2
if [ "$PART" = pp ] || [ "$PART" = all ]; then
  run neo1.3b-pp2-gpipe
  run neo1.3b-pp2-1f1b --trace "$OUT/neo1.3b-pp2-1f1b.trace.json"
  run neo1.3b-pp2-inter
fi
if [ "$PART" = tp ] || [ "$PART" = all ]; then
  run neo1.3b-tp2
  run neo1.3b-tp2-sp
fi
say "summary"
python3 scripts/dist_summary.py "$OUT" 2>&1 | tee "$OUT/summary-3d.txt" | tee -a "$LOG"
python3 scripts/losses_vs.py "$OUT" neo1.3b-dp1 2>&1 | tee -a "$OUT/summary-3d.txt" | tee -a "$LOG"
(cd "$OUT" && tar -czf results-3d.tgz *.json && rm -f *.json)
