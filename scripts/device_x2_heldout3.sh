#!/usr/bin/env bash
# One nvidia-h200-x2 call, the third held-out set (issue 10) and issue 9's
# GPT-Neo-1.3B plans:
#  1. build; `planner calibrate` on one GPU and under mpirun -np 2 (this host);
#  2. before any plan runs, the held-out predictions with those two profiles:
#     examples/sweep_h200_heldout3.json (one GPU, profile-1gpu.json) and
#     examples/sweep_h200x2_heldout3.json (two GPUs, profile-2gpu.json);
#  3. the two held-out sweeps (--kernels), then, with the time left,
#     examples/sweep_h200x2_3d.json with the committed profile
#     validation/h200x2/calib-links/profile-2gpu.json (predictions committed in
#     validation/h200x2-3d/predicted-3 before this call).
#   OUT=/some/dir bash scripts/device_x2_heldout3.sh
# Everything lands in $OUT/results.tgz (the device tool returns few files).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:?set OUT}
R=$OUT/r
mkdir -p "$R"
START=$(date +%s)
left() { echo $(( ${BUDGET:-575} - ($(date +%s) - START) )); }
finish() {
  find "$R" -name results.tgz -delete
  tar czf "$OUT/results.tgz" -C "$R" .
  grep -h "^half\|^fit verdicts\|^== " "$R"/*/log.txt 2>/dev/null | tail -40
}
trap finish EXIT

OUT=$R/calib PART=calibrate BUDGET=200 bash scripts/device_calibrate.sh >"$R/calib.console.txt" 2>&1
X=./build-dev/planner
P1=$R/calib/profile-1gpu.json P2=$R/calib/profile-2gpu.json
[ -e "$P1" ] && [ -e "$P2" ] || { echo "calibrate did not write both profiles"; tail -30 "$R/calib.console.txt"; exit 1; }
for s in 1:examples/sweep_h200_heldout3.json:$P1 2:examples/sweep_h200x2_heldout3.json:$P2; do
  IFS=: read -r g sweep prof <<<"$s"
  $X validate "$sweep" -o "$R/predicted-${g}gpu" --predict-only --no-plots --profile "$prof" --headroom 0 \
    >"$R/predicted-${g}gpu.txt" 2>&1
done
echo "predictions written $(date -u +%FT%TZ), $(( $(date +%s) - START )) s in" | tee "$R/predicted.stamp"
run() {  # run NAME SWEEP PROFILE [extra validate args]
  local name=$1 sweep=$2 prof=$3; shift 3
  local t=$(( $(left) - 15 ))
  if [ "$t" -lt 40 ]; then echo "no time left for $name" | tee -a "$R/skipped.txt"; return; fi
  OUT=$R/$name PART=sweep SWEEP=$sweep PROFILE=$prof BUILD=0 PLANNER_BIN=$X BUDGET=$t "$@" \
    bash scripts/device_calibrate.sh >"$R/$name.console.txt" 2>&1
}
run heldout3-2gpu examples/sweep_h200x2_heldout3.json "$P2" env KERNELS=1
run heldout3-1gpu examples/sweep_h200_heldout3.json "$P1" env KERNELS=1
run issue9 examples/sweep_h200x2_3d.json validation/h200x2/calib-links/profile-2gpu.json env
