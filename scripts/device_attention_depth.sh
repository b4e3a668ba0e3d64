#!/usr/bin/env bash
# Device run: does a fused attention kernel run slower per call in a deep
# model's training step than in a shallow one's? `planner exec --kernels` of
# the same model at several depths (validation/h200/attention-depth/plans:
# GPT-Neo-1.3B at 4, 8 and 24 layers, OPT-2.7B at 8 and 32; mbs 4, 2048
# tokens, bf16, one GPU), with the SM clock and power logged every 100 ms.
#   OUT=/some/dir bash scripts/device_attention_depth.sh
. "$(dirname "$0")/device_lib.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
build_target planner
for p in validation/h200/attention-depth/plans/*.json; do
  n=$(basename "$p" .json)
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 >"$R/clocks-$n.csv" 2>&1 &
  smi=$!
  echo "== $n ($(( $(date +%s) - START )) s)"
  timeout 120 ./build-dev/planner exec "$p" --steps 8 --warmup 4 --kernels -q --json >"$R/$n.json" 2>"$R/$n.err"
  echo "exit $?"
  kill $smi
done
echo "done in $(( $(date +%s) - START )) s"
