#!/usr/bin/env bash
# Device run: benchmarks/step_gemms.cpp on one GPU (why a step's GEMMs run
# faster than calibrate's timing of the same GEMMs), with the SM clock and
# power logged every 50 ms beside it. Writes under $OUT/r and packs
# $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_step_gemms.sh
set -uo pipefail
OUT=${OUT:?}
R=$OUT/r
mkdir -p "$R"
exec > >(tee -a "$R/log.txt") 2>&1
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$SP/torch/share/cmake" -DNCCL_ROOT="$SP/nvidia/nccl" >"$R/build.log" 2>&1 &&
  cmake --build build-dev --target step_gemms -j "$(nproc)" >>"$R/build.log" 2>&1 ||
  { grep -E "error" "$R/build.log" | head -30; tar czf "$OUT/results.tgz" -C "$R" .; exit 1; }
echo "built in $(( $(date +%s) - START )) s"
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
tar czf "$OUT/results.tgz" -C "$R" .
echo "done in $(( $(date +%s) - START )) s"
