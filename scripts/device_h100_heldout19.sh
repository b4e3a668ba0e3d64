#!/usr/bin/env bash
# One nvidia-h100-x1 call, held-out set 19: build, then with the committed
# profile validation/h100/calib19/profile-h100.json (no calibrate in this
# call; the predictions are committed under validation/h100/heldout19/
# predicted-*) and --kernels: examples/sweep_h100_heldout19.json, eight
# one-GPU plans. Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_h100_heldout19.sh
PROFILE=validation/h100/calib19/profile-h100.json SWEEPS="sweep_h100_heldout19" exec bash "$(dirname "$0")/device_sweeps.sh"
