#!/usr/bin/env bash
# The one device runner: runs a suite file (validation/suites/*.json) on a GPU
# machine in one device call, from the repository root:
#
#   bash scripts/device_run.sh validation/suites/h200x2_heldout18.json
#
# as the device tool's command (it runs in the repository root and sets $OUT;
# ask for the suite's "machine" kind, e.g. nvidia-h200-x2, with timeout_s 600).
# Results come back under $OUT: results.tgz (everything: r/log.txt, one console
# file per step, each sweep's validate folder, each exec/baseline result,
# calib/profile-*.json) and r/log.txt itself. Unpack results.tgz into the
# validation folder the run belongs to and commit it with a README.md.
#
#   bash scripts/device_run.sh --dry-run SUITE     # print the commands, run nothing (no GPU needed)
#   bash scripts/device_run.sh --budget 400 SUITE  # seconds for the whole call (default: the suite's budget_s, else 560)
#
# What a suite can hold (build, setup commands, calibrate, predictions, sweeps,
# planner exec runs, PyTorch baselines, closing commands) and the order they
# run in: validation/suites/README.md; the work is scripts/device_suite.py.
# Multicast stays off (NCCL_NVLS_ENABLE=0 and the two like it), as the device
# tool asks.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
exec python3 "$(dirname "$0")/device_suite.py" "$@"
