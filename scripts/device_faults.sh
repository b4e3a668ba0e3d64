#!/usr/bin/env bash
# Device check of the paths the CPU tests cannot reach: NCCL with a rank killed
# mid-step (the job must end within 60 s naming the rank, no result file), and
# offload on two GPUs (ZeRO-3 with parameter offload: shards from pinned host
# memory on the copy stream, all-gathers issued from it; ZeRO-2 with optimizer
# offload: gradients to the host and parameters back, all-gathers after the
# copies). OUT=/dir bash scripts/device_faults.sh on the nvidia-h200-x2 machine.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-$PWD/out-faults}
mkdir -p "$OUT"
LOG="$OUT/log-faults.txt"
: >"$LOG"
say() { echo "== $*" | tee -a "$LOG"; }
SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
say "build"
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$SP/torch/share/cmake" -DNCCL_ROOT="$SP/nvidia/nccl" >>"$LOG" 2>&1 || { tail -30 "$LOG"; exit 1; }
cmake --build build-dev --target planner >>"$LOG" 2>&1 || { grep -E "error" "$LOG" | head -40; exit 1; }
X=./build-dev/planner
D=examples/plans/h200x2
if [ "${KILL:-1}" = 1 ]; then
say "rank 1 killed at step 4 (NCCL, ZeRO-3)"
t0=$(date +%s)
PLANNER_TEST_KILL=1:4 timeout 200 $X exec $D/neo1.3b-dp2-zero3.json --steps 8 --warmup 2 -q -o "$OUT/killed.json" >"$OUT/killed.out" 2>"$OUT/killed.err"
rc=$?
echo "exit $rc after $(( $(date +%s) - t0 )) s; result file: $([ -e "$OUT/killed.json" ] && echo WRITTEN || echo none)" | tee -a "$LOG"
grep -iE "rank 1|rank" "$OUT/killed.err" | head -5 | tee -a "$LOG"
fi
for n in neo1.3b-dp2-zero3-offload-all neo1.3b-dp2-zero2-offload; do
  say "planner exec $n"
  timeout 240 $X exec $D/$n.json --steps 4 --warmup 1 -o "$OUT/$n.exec.json" 2>&1 | grep -vE "warm-up step" | tee -a "$LOG"
done
(cd "$OUT" && tar -czf results-faults.tgz *.json 2>/dev/null; rm -f *.json)
