#!/usr/bin/env bash
# One nvidia-h200-x2 call: the held-out two-GPU sweep examples/sweep_h200x2_heldout.json
# (predictions committed in validation/h200x2/heldout2/predicted before the run),
# then, with the time left, half A of examples/sweep_h200x2.json again (its
# first run, ../heldout-a, was before the runtime's expandable segments; this
# re-run is not held out).
#   OUT=/some/dir bash scripts/device_x2_heldout2.sh
# Everything lands in $OUT/results.tgz.
set -uo pipefail
OUT=${OUT:?set OUT}
R=$OUT/r
mkdir -p "$R"
START=$(date +%s)
PROFILE=validation/h200x2/calib/profile-2gpu.json
OUT=$R/heldout2 PART=sweep SWEEP=examples/sweep_h200x2_heldout.json PROFILE=$PROFILE KERNELS=1 BUDGET=360 \
  bash scripts/device_calibrate.sh >"$R/heldout2.console.txt" 2>&1
left=$(( 555 - ($(date +%s) - START) ))
if [ "$left" -gt 100 ]; then
  OUT=$R/half-a PART=sweep SWEEP=examples/sweep_h200x2.json HALF=A PROFILE=$PROFILE BUILD=0 \
    PLANNER_BIN=./build-dev/planner BUDGET=$left bash scripts/device_calibrate.sh >"$R/half-a.console.txt" 2>&1
fi
find "$R" -name results.tgz -delete
tar czf "$OUT/results.tgz" -C "$R" .
grep -h "^half\|^fit verdicts" "$R"/*/log.txt
