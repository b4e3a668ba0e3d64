#!/usr/bin/env bash
# One nvidia-h200 call, held-out set 15 (issue 10): build, then
# examples/sweep_h200_heldout15.json with the compiled-in H200 default
# profile (no --profile; the predictions are committed under
# validation/h200/heldout15/predicted*) and --kernels, on a one-H200 machine.
# Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_h200_heldout15.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:?set OUT}
R=$OUT/r
mkdir -p "$R"
finish() {
  find "$R" -name results.tgz -delete
  tar czf "$OUT/results.tgz" -C "$R" .
  grep -h "^half\|^all:\|^fit verdicts\|^== " "$R"/*/log.txt 2>/dev/null | tail -20
}
trap finish EXIT
env OUT="$R/sweep_h200_heldout15" PART=sweep SWEEP=examples/sweep_h200_heldout15.json BUDGET=${BUDGET:-540} KERNELS=1 \
  bash scripts/device_calibrate.sh >"$R/sweep_h200_heldout15.console.txt" 2>&1
