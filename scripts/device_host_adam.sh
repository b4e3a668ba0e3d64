#!/usr/bin/env bash
# One nvidia-h100-x2 call (two GPUs, one host): planner's one-pass host AdamW
# (runtime/optim/adamw.cpp) against LibTorch's three passes, which the runtime
# ran before (PLANNER_HOST_ADAM=libtorch), in the same call:
#  1. benchmarks/host_adam_bench.cpp on 2^28 parameters: one process with every
#     core; the same beside a spinning thread; two processes at once with half
#     the cores each (as two ranks of a two-GPU offload plan);
#  2. `planner exec` of three offload plans of held-out set 6 (two one-GPU, one
#     two-GPU), each with either update, alternated (not held out: these plans
#     ran before).
# Writes under $OUT/r and puts everything in $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_host_adam.sh
set -uo pipefail
[ -n "${OUT:-}" ] || { echo "device_host_adam.sh: set OUT to the folder to write into" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r
mkdir -p "$R"
trap 'tar czf "$OUT/results.tgz" -C "$R" .' EXIT
P=validation/h100x2/heldout6
PLANS="$P/run-1gpu/validate/plans/neo-1.3b-offload-opt-selective.json
$P/run-1gpu/validate/plans/llama3.2-3b-offload-opt-full.json
$P/run-2gpu/validate/plans/opt-2.7b-dp2-z2-offload-opt-selective.json"
{
  echo "== build $(date +%T)"
  SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$SP/torch/share/cmake" -DNCCL_ROOT="$SP/nvidia/nccl" >"$R/build.log" 2>&1 &&
    cmake --build build-dev --target planner host_adam_bench -j "$(nproc)" >>"$R/build.log" 2>&1 ||
    { tail -30 "$R/build.log"; exit 1; }
  C=$(nproc)
  echo "== bench: one process, $C threads $(date +%T)"
  timeout 120 ./build-dev/host_adam_bench --params 268435456 --threads "$C" --json "$R/bench-one.json"
  echo "== bench: one process, $C threads, beside a spinning thread $(date +%T)"
  timeout 120 ./build-dev/host_adam_bench --params 268435456 --threads "$C" --spin --json "$R/bench-spin.json"
  echo "== bench: two processes at once, $((C / 2)) threads each $(date +%T)"
  at=$(( $(date +%s) + 25 ))
  for i in 0 1; do
    timeout 150 ./build-dev/host_adam_bench --params 268435456 --threads $((C / 2)) --start-at "$at" \
      --json "$R/bench-two-$i.json" >"$R/bench-two-$i.txt" 2>&1 &
  done
  wait
  cat "$R"/bench-two-*.txt
  for round in 1 2; do
    while read -r plan; do
      n=$(basename "$plan" .json)
      for impl in planner libtorch; do
        echo "== exec $n host AdamW $impl (round $round) $(date +%T)"
        PLANNER_HOST_ADAM=$impl timeout 150 ./build-dev/planner exec "$plan" --steps 5 --warmup 2 -q \
          -o "$R/$n-$impl-$round.json" >/dev/null 2>"$R/$n-$impl-$round.err"
        echo "rc $?"
        python3 -c "
import json; m=json.load(open('$R/$n-$impl-$round.json'))['measurement']
print('step %.4f s  CPU AdamW %.3g /s (%.3f s)  host memcpy %.1f GB/s  steal %s' % (m['step_seconds']['median'], m['cpu_adam_params_per_second'], m['cpu_adam_seconds'], m['host_copy_gbps'], m.get('cpu_steal_fraction')))" 2>&1 | tail -1
      done
    done <<<"$PLANS"
  done
  echo "== done $(date +%T)"
} 2>&1 | tee "$R/log.txt"
