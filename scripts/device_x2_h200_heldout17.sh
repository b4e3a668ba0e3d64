#!/usr/bin/env bash
# One nvidia-h200-x2 call, held-out set 17 (issues 9 and 10): build, then with
# the committed profile validation/h200x2/calib16/profile-2gpu-refit.json (no
# calibrate in this call; the predictions are committed under
# validation/h200x2/heldout17/predicted-*) and --kernels, in this order:
#   examples/sweep_h200x2_heldout17.json  ten two-GPU plans
#   examples/sweep_h200x2_3d.json         issue 9's GPT-Neo-1.3B plans
#   examples/sweep_h200_heldout17.json    ten one-GPU plans on GPU 0
# Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_x2_h200_heldout17.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:?set OUT}
R=$OUT/r
mkdir -p "$R"
START=$(date +%s)
BUDGET=${BUDGET:-560}
PROFILE=validation/h200x2/calib16/profile-2gpu-refit.json
finish() {
  find "$R" -name results.tgz -delete
  tar czf "$OUT/results.tgz" -C "$R" .
  grep -h "^half\|^all:\|^fit verdicts\|^== " "$R"/*/log.txt 2>/dev/null | tail -40
}
trap finish EXIT
build=1
for s in sweep_h200x2_heldout17 sweep_h200x2_3d sweep_h200_heldout17; do
  t=$(( BUDGET - ($(date +%s) - START) - 15 ))
  if [ "$t" -lt 40 ]; then echo "no time left for $s" | tee -a "$R/skipped.txt"; continue; fi
  env OUT="$R/$s" PART=sweep SWEEP="examples/$s.json" PROFILE="$PROFILE" BUILD=$build PLANNER_BIN=./build-dev/planner \
    BUDGET=$t KERNELS=1 bash scripts/device_calibrate.sh >"$R/$s.console.txt" 2>&1
  build=0
done
