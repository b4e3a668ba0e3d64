#!/usr/bin/env bash
# One nvidia-h100-x2 call, held-out set 11 (issue 10), the first with calibrate's
# in-step GEMM rate, the weight-gradient GEMM rate and the attention rates per
# head dimension and sequence (calibration/measure_in_step.cpp,
# costmodel/calibration.cpp): calibrate this host (one GPU and mpirun -np 2),
# predict both sweeps with its profiles before any plan runs, then run them
# (--kernels), the two-GPU sweep first. scripts/device_x2_same_host.sh does the
# work; its calibrate part gets 330 s (the in-step part adds about 25 s a rank).
#   OUT=/some/dir bash scripts/device_x2_heldout11.sh
[ -n "${OUT:-}" ] || { echo "device_x2_heldout11.sh: set OUT to the folder to write into" >&2; exit 2; }
CAL_BUDGET=${CAL_BUDGET:-330} exec bash scripts/device_x2_same_host.sh \
  'heldout11-2gpu|examples/sweep_h100x2_heldout11.json|2gpu||1' \
  'heldout11-1gpu|examples/sweep_h100_heldout11.json|1gpu||1'
