#!/usr/bin/env bash
# One nvidia-h200-x2 (or one-GPU) call: the one-GPU ZeRO-3 offload=all plan of
# validation/h200x2/offload4 again after the Engine's compute stream waits for
# each unit's own parameter copy (SideStream::mark/wait) instead of joining the
# whole copy stream, which also held it for the next unit's prefetch. Prints
# forward/backward action times and the losses against the committed run (the
# same seed and data: the losses must be the same).
#   OUT=/some/dir bash scripts/device_offload_all_overlap.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:?set OUT}
R=$OUT/r
mkdir -p "$R"
trap 'tar czf "$OUT/results.tgz" -C "$R" .' EXIT
OUT=$R/run PART=sweep SWEEP=examples/sweep_h200_offload_heldout4.json ONLY=neo-2.7b-z3-offload-all \
  PROFILE=validation/h200x2/offload4/calib/profile-1gpu.json KERNELS=1 BUDGET=400 \
  bash scripts/device_calibrate.sh >"$R/console.txt" 2>&1
python3 - "$R" <<'PY' | tee "$R/compare.txt"
import json, sys
R = sys.argv[1]
new = json.load(open(f"{R}/run/validate/runs/neo-2.7b-z3-offload-all.json"))["measurement"]
old = json.load(open("validation/h200x2/offload4/run-1gpu/validate/runs/neo-2.7b-z3-offload-all.json"))["measurement"]
for k in ("F", "B"):
    print(f"action {k}: before {old['action_seconds'][k]:.4f} s, after {new['action_seconds'][k]:.4f} s")
print(f"step median: before {old['step_seconds']['median']:.4f} s, after {new['step_seconds']['median']:.4f} s")
print("losses before", old["losses"])
print("losses after ", new["losses"])
print("losses identical:", old["losses"] == new["losses"],
      "max |diff|:", max(abs(a - b) for a, b in zip(old["losses"], new["losses"])))
PY
grep -h "^half\|neo-2.7b" "$R/run/log.txt" | tail -4
