#!/usr/bin/env bash
# One nvidia-h200-x2 call after the runtime's offload=all overlap fix (eacd30a;
# issue 10): build; `planner calibrate` on one GPU and under mpirun -np 2 on
# this host; before any plan runs, the predictions of the held-out offload
# sets examples/sweep_h200_offload_heldout5.json (one GPU, profile-1gpu.json)
# and examples/sweep_h200x2_offload_heldout5.json (two GPUs, profile-2gpu.json);
# then those two sweeps (--kernels).
#   OUT=/some/dir bash scripts/device_x2_offload5.sh
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
  grep -h "^half\|^fit verdicts\|^== \|CPU AdamW" "$R"/*/log.txt "$R"/calib/calibrate-*.err 2>/dev/null | tail -40
}
trap finish EXIT

OUT=$R/calib PART=calibrate BUDGET=200 bash scripts/device_calibrate.sh >"$R/calib.console.txt" 2>&1
X=./build-dev/planner
P1=$R/calib/profile-1gpu.json P2=$R/calib/profile-2gpu.json
[ -e "$P1" ] && [ -e "$P2" ] || { echo "calibrate did not write both profiles"; tail -30 "$R/calib.console.txt"; exit 1; }
for s in 1:examples/sweep_h200_offload_heldout5.json:$P1 2:examples/sweep_h200x2_offload_heldout5.json:$P2; do
  IFS=: read -r g sweep prof <<<"$s"
  $X validate "$sweep" -o "$R/predicted-${g}gpu" --predict-only --no-plots --profile "$prof" --headroom 0 \
    >"$R/predicted-${g}gpu.txt" 2>&1
done
echo "predictions written $(date -u +%FT%TZ), $(( $(date +%s) - START )) s in" | tee "$R/predicted.stamp"
run() {  # run NAME SWEEP PROFILE [env assignments...]
  local name=$1 sweep=$2 prof=$3; shift 3
  local t=$(( $(left) - 15 ))
  if [ "$t" -lt 40 ]; then echo "no time left for $name" | tee -a "$R/skipped.txt"; return; fi
  env OUT="$R/$name" PART=sweep SWEEP="$sweep" PROFILE="$prof" BUILD=0 PLANNER_BIN=$X BUDGET=$t "$@" \
    bash scripts/device_calibrate.sh >"$R/$name.console.txt" 2>&1
}
run offload5-2gpu examples/sweep_h200x2_offload_heldout5.json "$P2" KERNELS=1
run offload5-1gpu examples/sweep_h200_offload_heldout5.json "$P1" KERNELS=1
