#!/usr/bin/env bash
# One one-GPU device call: is the offload step's CPU AdamW slower in
# `planner exec` than in calibrate because of the thread team? Builds, then
# runs one offload plan of held-out set 6 (neo-1.3b, ZeRO-1, optimizer
# offload; it ran at 1.68e9 parameters/s where calibrate measured 3.0e9) four
# times: LibTorch's default team (every core), OMP_NUM_THREADS=31, =16, and
# the default again (drift). Writes $OUT/log.txt and $OUT/<case>.json.
#   OUT=/some/dir bash scripts/device_offload_threads.sh
set -uo pipefail
[ -n "${OUT:-}" ] || { echo "device_offload_threads.sh: set OUT to the folder to write into" >&2; exit 2; }
PLAN=validation/h100x2/heldout6/run-1gpu/validate/plans/neo-1.3b-offload-opt-selective.json
{
  SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$SP/torch/share/cmake" -DNCCL_ROOT="$SP/nvidia/nccl" >"$OUT/build.log" 2>&1 &&
    cmake --build build-dev --target planner -j "$(nproc)" >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  for c in default:"" t31:31 t16:16 default2:""; do
    name=${c%%:*} t=${c#*:}
    echo "== $name OMP_NUM_THREADS=${t:-unset} $(date +%T)"
    if [ -n "$t" ]; then export OMP_NUM_THREADS=$t; else unset OMP_NUM_THREADS; fi
    timeout 120 ./build-dev/planner exec "$PLAN" --steps 5 --warmup 2 -q -o "$OUT/$name.json" >/dev/null 2>"$OUT/$name.err"
    echo "rc $?"
    python3 -c "
import json; m=json.load(open('$OUT/$name.json'))['measurement']
print('step %.4f s  CPU AdamW %.3g /s (%.3f s)  host memcpy %.1f GB/s  steal %s' % (m['step_seconds']['median'], m['cpu_adam_params_per_second'], m['cpu_adam_seconds'], m['host_copy_gbps'], m.get('cpu_steal_fraction')))"
  done
} > "$OUT/log.txt" 2>&1
cat "$OUT/log.txt"
