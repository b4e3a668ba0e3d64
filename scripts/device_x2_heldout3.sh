#!/usr/bin/env bash
# One nvidia-h200-x2 call, the third held-out set (issue 10) and issue 9's
# GPT-Neo-1.3B plans: calibrate this host, predict both held-out sweeps with
# its profiles before any plan runs, run them (--kernels), then
# examples/sweep_h200x2_3d.json with the committed profile
# validation/h200x2/calib-links/profile-2gpu.json (predictions committed in
# validation/h200x2-3d/predicted-3 before the call). scripts/device_x2_same_host.sh does the work.
#   OUT=/some/dir bash scripts/device_x2_heldout3.sh
exec bash scripts/device_x2_same_host.sh \
  'heldout3-2gpu|examples/sweep_h200x2_heldout3.json|2gpu||1' \
  'heldout3-1gpu|examples/sweep_h200_heldout3.json|1gpu||1' \
  'issue9|examples/sweep_h200x2_3d.json|validation/h200x2/calib-links/profile-2gpu.json||0'
