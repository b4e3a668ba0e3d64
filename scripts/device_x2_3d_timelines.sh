#!/usr/bin/env bash
# One nvidia-h200-x2 call: issue 9's GPT-Neo-1.3B plans (examples/sweep_h200x2_3d.json)
# through planner validate with --kernels, the pipeline plans now with their
# predicted and measured timelines (timeline_*.png) and rank 0's own stage in
# the kernel comparison; predictions as committed in
# validation/h200x2/heldout13/predicted-sweep_h200x2_3d (the H200 default profile).
#   OUT=/some/dir bash scripts/device_x2_3d_timelines.sh
[ -n "${OUT:-}" ] || { echo "device_x2_3d_timelines.sh: set OUT to the folder to write into" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT/r"
OUT="$OUT/r" PART=sweep SWEEP=examples/sweep_h200x2_3d.json PROFILE=validation/h200x2/calib13/profile-2gpu-refit.json \
  KERNELS=1 BUDGET=${BUDGET:-200} bash scripts/device_calibrate.sh > "$OUT/r/console.txt" 2>&1
cp "$OUT/r/results.tgz" "$OUT/results.tgz"
grep -E "^validate: \[|^half|^fit" "$OUT/r/log.txt" | grep -v "^+"
