#!/usr/bin/env bash
# One nvidia-h200 call, held-out set 15 (issue 10): build, then
# examples/sweep_h200_heldout15.json with the compiled-in H200 default
# profile (no --profile: at 73623b9, calib14's; the default is calib16's
# since, so a rerun at a later commit tests that one; the predictions are committed under
# validation/h200/heldout15/predicted*) and --kernels, on a one-H200 machine.
# Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_h200_heldout15.sh
PROFILE= SWEEPS="sweep_h200_heldout15" exec bash "$(dirname "$0")/device_sweeps.sh"
