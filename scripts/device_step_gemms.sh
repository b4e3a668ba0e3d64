#!/usr/bin/env bash
# Device run: benchmarks/step_gemms.cpp on one GPU (why a step's GEMMs run
# faster than calibrate's timing of the same GEMMs), with the SM clock and
# power logged every 50 ms beside it. Writes under $OUT/r and packs
# $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_step_gemms.sh
. "$(dirname "$0")/device_lib.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
build_target step_gemms
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 50 >"$R/clocks.csv" 2>&1 &
SMI=$!
# RUNS: one "--model M --precision P --layers L" per line; SECONDS: sustained seconds before each way.
RUNS=${RUNS:-"--model gpt-neo-1.3b --precision bf16 --layers 4
--model opt-1.3b --precision bf16 --layers 4
--model tinyllama --precision bf16 --layers 4
--model gpt-neo-1.3b --precision fp16 --layers 4
--model gpt-neo-1.3b --precision fp32 --layers 4"}
while read -r a; do
  [ -n "$a" ] || continue
  n=$(echo "$a" | awk '{print $2"-"$4"-"$6}')
  echo "== $n ($(( $(date +%s) - START )) s)"
  timeout 150 ./build-dev/step_gemms $a --seconds "${SECONDS_SUSTAIN:-0}" --json "$R/$n.json"
done <<<"$RUNS"
kill $SMI
echo "done in $(( $(date +%s) - START )) s"
