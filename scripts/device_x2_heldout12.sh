#!/usr/bin/env bash
# One nvidia-h100-x2 call, held-out set 12 (issue 10): as set 11
# (scripts/device_x2_heldout11.sh) after the fp32 grouped-query attention case
# left the fp32 attention rates, head dimension 80 joined calibrate's grid
# and the simulator slowed compute beside DP/ZeRO collectives.
# To fit the session's last device time, only the mpirun -np 2 calibrate runs
# (its rank 0 measures the single-GPU part alone, as the one-GPU calibrate
# does) and both sweeps are predicted with its profile before any plan runs;
# the whole call gets 510 s (BUDGET), the two-GPU sweep first.
#   OUT=/some/dir bash scripts/device_x2_heldout12.sh
[ -n "${OUT:-}" ] || { echo "device_x2_heldout12.sh: set OUT to the folder to write into" >&2; exit 2; }
SKIP_1GPU=1 CAL_BUDGET=${CAL_BUDGET:-250} BUDGET=${BUDGET:-510} exec bash scripts/device_x2_same_host.sh \
  'heldout12-2gpu|examples/sweep_h100x2_heldout12.json|2gpu||1' \
  'heldout12-1gpu|examples/sweep_h100_heldout12.json|2gpu||1'
