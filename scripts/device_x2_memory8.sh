#!/usr/bin/env bash
# One nvidia-h100-x2 call, the held-out check of the LM-head memory fix
# (ead4a25): build, then the two memory-8 sweeps with the committed profiles of
# held-out set 6 (predictions committed under validation/h100x2/memory8 before
# the call). No calibration (memory does not depend on the measured rates).
#   OUT=/some/dir bash scripts/device_x2_memory8.sh
set -uo pipefail
[ -n "${OUT:-}" ] || { echo "device_x2_memory8.sh: set OUT to the folder to write into" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0
P=validation/h100x2/heldout6/calib
R=$OUT/r
mkdir -p "$R"
finish() {
  find "$R" -name results.tgz -delete
  tar czf "$OUT/results.tgz" -C "$R" .
  grep -h "^half\|^fit verdicts\|^== " "$R"/run-*/log.txt
}
trap finish EXIT
OUT=$R/run-2gpu PART=sweep SWEEP=examples/sweep_h100x2_memory_heldout8.json PROFILE=$P/profile-2gpu.json \
  BUDGET=200 bash scripts/device_calibrate.sh > "$R/run-2gpu.console.txt" 2>&1
OUT=$R/run-1gpu PART=sweep SWEEP=examples/sweep_h100_memory_heldout8.json PROFILE=$P/profile-1gpu.json \
  BUILD=0 BUDGET=120 bash scripts/device_calibrate.sh > "$R/run-1gpu.console.txt" 2>&1
