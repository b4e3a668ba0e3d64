#!/usr/bin/env bash
# One nvidia-h200-x2 call (issue 9, run6 of validation/h200x2-3d; issue 10's
# H200 profile): build; `planner calibrate` under mpirun -np 2 (rank 0 measures
# the single-GPU part alone, in-step GEMM rate and attention table included);
# before any plan runs, the predictions of examples/sweep_h200x2_3d.json with
# that profile; then that sweep with --kernels (pp=2 GPipe, 1F1B, interleaved;
# dp=2 ZeRO-1; tp=2 with and without sp; GPT-Neo-1.3B bf16).
#   OUT=/some/dir bash scripts/device_x2_h200_3d4.sh
[ -n "${OUT:-}" ] || { echo "device_x2_h200_3d4.sh: set OUT to the folder to write into" >&2; exit 2; }
SKIP_1GPU=1 CAL_BUDGET=${CAL_BUDGET:-260} BUDGET=${BUDGET:-480} exec bash scripts/device_x2_same_host.sh \
  '3d|examples/sweep_h200x2_3d.json|2gpu||1'
