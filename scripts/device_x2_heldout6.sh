#!/usr/bin/env bash
# One nvidia-h100-x2 call, the sixth held-out set (issue 10), the first on two
# H100s: calibrate this host (one GPU and mpirun -np 2), predict both sweeps
# with its profiles before any plan runs, then run them (--kernels), the
# two-GPU sweep first. scripts/device_x2_same_host.sh does the work.
#   OUT=/some/dir bash scripts/device_x2_heldout6.sh
exec bash scripts/device_x2_same_host.sh \
  'heldout6-2gpu|examples/sweep_h100x2_heldout6.json|2gpu||1' \
  'heldout6-1gpu|examples/sweep_h100_heldout6.json|1gpu||1'
