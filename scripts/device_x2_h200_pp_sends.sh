#!/usr/bin/env bash
# One nvidia-h200-x2 call after the pipeline stages free their finished sends
# (runtime/engine.cpp Impl::reap): issue 9's sweep (examples/sweep_h200x2_3d.json)
# and set 18's three pipeline plans again, with the profile and the
# predictions set 18 committed (validation/h200x2/calib18/profile-2gpu-refit.json,
# validation/h200x2/heldout18/predicted-*; neither the memory nor the time
# model changed since). Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir bash scripts/device_x2_h200_pp_sends.sh
. "$(dirname "$0")/device_lib.sh"
build_target planner
P=validation/h200x2/calib18/profile-2gpu-refit.json
timeout 200 ./build-dev/planner validate examples/sweep_h200x2_3d.json -o "$R/3d" --profile "$P" --headroom 0 \
  --timeout 100 >"$R/3d.txt" 2>&1
echo "exit $?"; grep -A9 "^plan " "$R/3d.txt" | head -10
timeout 150 ./build-dev/planner validate examples/sweep_h200x2_heldout18.json -o "$R/pp18" --profile "$P" --headroom 0 \
  --timeout 100 --only gpt2-xl-pp2-1f1b-bf16-mbs8-gas4,opt-1.3b-pp2-interleaved-fp16-mbs4-gas8,tinyllama-pp2-gpipe-bf16-mbs6-gas4 \
  >"$R/pp18.txt" 2>&1
echo "exit $?"; grep -A6 "^plan " "$R/pp18.txt" | head -7
echo "done in $(( $(date +%s) - START )) s"
