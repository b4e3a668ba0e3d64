#!/usr/bin/env bash
# One nvidia-h200-x2 call, held-out set 18 (issues 9 and 10): build, then with
# the committed profile validation/h200x2/calib18/profile-2gpu-refit.json (no
# calibrate in this call; the predictions are committed under
# validation/h200x2/heldout18/predicted-*) and --kernels, in this order:
#   examples/sweep_h200x2_heldout18.json  ten two-GPU plans
#   examples/sweep_h200x2_3d.json         issue 9's GPT-Neo-1.3B plans
#   examples/sweep_h200_heldout18.json    eight one-GPU plans on GPU 0
# Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_x2_h200_heldout18.sh
PROFILE=validation/h200x2/calib18/profile-2gpu-refit.json SWEEPS="sweep_h200x2_heldout18 sweep_h200x2_3d sweep_h200_heldout18" exec bash "$(dirname "$0")/device_sweeps.sh"
