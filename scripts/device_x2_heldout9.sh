#!/usr/bin/env bash
# One nvidia-h100-x2 call, held-out set 9 (issue 10), the first after the
# one-pass host AdamW (runtime/optim/adamw.cpp): calibrate this host (one GPU
# and mpirun -np 2), predict both sweeps with its profiles before any plan
# runs, then run them (--kernels), the two-GPU sweep first.
# scripts/device_x2_same_host.sh does the work.
#   OUT=/some/dir bash scripts/device_x2_heldout9.sh
[ -n "${OUT:-}" ] || { echo "device_x2_heldout9.sh: set OUT to the folder to write into" >&2; exit 2; }
exec bash scripts/device_x2_same_host.sh \
  'heldout9-2gpu|examples/sweep_h100x2_heldout9.json|2gpu||1' \
  'heldout9-1gpu|examples/sweep_h100_heldout9.json|1gpu||1'
