#!/usr/bin/env bash
# One nvidia-h200-x2 call, held-out set 16 (issues 9 and 10): build, then with
# the committed profile validation/h200x2/calib15/profile-2gpu-refit.json
# (the run used profile-2gpu.json, whose memory_in_step_factor field is gone
# since; the refit is the same fit without it) (no
# calibrate in this call; the predictions are committed under
# validation/h200x2/heldout16/predicted-*) and --kernels, in this order:
#   examples/sweep_h200x2_heldout16.json  ten two-GPU plans
#   examples/sweep_h200_heldout16.json    ten one-GPU plans on GPU 0
# Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_x2_h200_heldout16.sh
PROFILE=validation/h200x2/calib15/profile-2gpu-refit.json SWEEPS="sweep_h200x2_heldout16 sweep_h200_heldout16" exec bash "$(dirname "$0")/device_sweeps.sh"
