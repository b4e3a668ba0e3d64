#!/usr/bin/env bash
# One device call that runs committed sweeps through `planner validate
# --kernels` with a committed profile (no calibrate in the call; the held-out
# sets' predictions are committed before it): build once, then each sweep in
# order, each under what is left of BUDGET (default 560 s). Used by the
# per-set scripts (device_x2_h200_heldout13/14/16/17.sh, device_h200_heldout15.sh).
#   OUT=/some/dir SWEEPS="sweep_a sweep_b" [PROFILE=validation/.../profile.json] bash scripts/device_sweeps.sh
# SWEEPS: names under examples/ without .json. PROFILE empty: the compiled-in
# default. Writes under $OUT/r (one folder and console file per sweep) and
# packs $OUT/results.tgz.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -n "${OUT:-}" ] || { echo "device_sweeps.sh: set OUT to the folder to write into" >&2; exit 2; }
[ -n "${SWEEPS:-}" ] || { echo "device_sweeps.sh: set SWEEPS to the sweeps to run (names under examples/)" >&2; exit 2; }
for s in $SWEEPS; do
  [ -f "examples/$s.json" ] || { echo "device_sweeps.sh: no examples/$s.json" >&2; exit 2; }
done
if [ -n "${PROFILE:-}" ] && [ ! -f "$PROFILE" ]; then echo "device_sweeps.sh: no profile $PROFILE" >&2; exit 2; fi
R=$OUT/r
mkdir -p "$R"
START=$(date +%s)
BUDGET=${BUDGET:-560}
finish() {
  find "$R" -name results.tgz -delete
  tar czf "$OUT/results.tgz" -C "$R" .
  grep -h "^half\|^all:\|^fit verdicts\|^== " "$R"/*/log.txt 2>/dev/null | tail -40
}
trap finish EXIT
build=1
for s in $SWEEPS; do
  t=$(( BUDGET - ($(date +%s) - START) - 15 ))
  if [ "$t" -lt 40 ]; then echo "no time left for $s" | tee -a "$R/skipped.txt"; continue; fi
  env OUT="$R/$s" PART=sweep SWEEP="examples/$s.json" PROFILE="${PROFILE:-}" BUILD=$build PLANNER_BIN=./build-dev/planner \
    BUDGET=$t KERNELS=1 bash scripts/device_calibrate.sh >"$R/$s.console.txt" 2>&1
  build=0
done
