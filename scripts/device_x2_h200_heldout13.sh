#!/usr/bin/env bash
# One nvidia-h200-x2 call, held-out set 13 (issues 9 and 10): build, then with
# the committed profile validation/h200x2/calib13/profile-2gpu-refit.json (no
# calibrate in this call; the predictions are committed under
# validation/h200x2/heldout13/predicted-*) and --kernels, in this order:
#   examples/sweep_h200x2_heldout13.json  ten two-GPU plans
#   examples/sweep_h200x2_3d.json         issue 9's GPT-Neo-1.3B plans
#   examples/sweep_h200_heldout13.json    twelve one-GPU plans on GPU 0
# Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_x2_h200_heldout13.sh
PROFILE=validation/h200x2/calib13/profile-2gpu-refit.json SWEEPS="sweep_h200x2_heldout13 sweep_h200x2_3d sweep_h200_heldout13" exec bash "$(dirname "$0")/device_sweeps.sh"
