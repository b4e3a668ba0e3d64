#!/usr/bin/env bash
# One nvidia-h200-x2 call after the NCCL backend stopped recording every
# collective's tensors on its stream and the sequence-parallel collectives lost
# their transpose copies (runtime/comm/nccl_backend.cpp, runtime/model/tensor_parallel.hpp):
#   1. scripts/device_3d.sh PART=tp: gpt-neo-1.3b on one GPU, dp=2, tp=2, tp=2
#      with sp (predictions: validation/h200x2-3d/predicted-2, committed);
#   2. scripts/device_calibrate.sh PART=calibrate: planner calibrate on one GPU
#      and under mpirun -np 2 (NCCL, and the CPU AdamW of both ranks at once),
#      then the predictions of the sweeps with each profile (before any run of
#      them in this call);
#   3. the half-B plans of examples/sweep_h200x2.json that missed in
#      validation/h200x2/heldout-b (the two TP+SP plans and ZeRO-3 offload=all),
#      with the default H200 profile as then.
#   OUT=/some/dir bash scripts/device_x2_tp_memory.sh
# Everything lands in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
START=$(date +%s)
OUT=$OUT/3d PART=tp STEPS=6 WARMUP=2 bash scripts/device_3d.sh
echo "== 3d done at $(( $(date +%s) - START )) s"
OUT=$OUT/cal PART=calibrate BUILD=0 PLANNER_BIN=./build-dev/planner BUDGET=260 bash scripts/device_calibrate.sh
echo "== calibrate done at $(( $(date +%s) - START )) s"
left=$(( 560 - ($(date +%s) - START) ))
if [ "$left" -gt 60 ]; then
  OUT=$OUT/b PART=sweep SWEEP=examples/sweep_h200x2.json HALF=B BUILD=0 PLANNER_BIN=./build-dev/planner \
    ONLY=opt-1.3b-tp2-sp,opt-350m-tp2-sp-fp16,opt-2.7b-dp2-z3-offload-all BUDGET=$left \
    bash scripts/device_calibrate.sh
fi
echo "== all done at $(( $(date +%s) - START )) s"
tar czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz 3d cal b 2>/dev/null
ls -la "$OUT"
