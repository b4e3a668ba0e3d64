#!/usr/bin/env bash
# One nvidia-h200-x2 call after the runtime's offload=all overlap fix (eacd30a;
# issue 10): calibrate this host, predict the held-out offload sets before any
# plan runs, run them (--kernels). scripts/device_x2_same_host.sh does the work.
#   OUT=/some/dir bash scripts/device_x2_offload5.sh
exec bash scripts/device_x2_same_host.sh \
  'offload5-2gpu|examples/sweep_h200x2_offload_heldout5.json|2gpu||1' \
  'offload5-1gpu|examples/sweep_h200_offload_heldout5.json|1gpu||1'
