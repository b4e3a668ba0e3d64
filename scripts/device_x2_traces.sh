#!/usr/bin/env bash
# One two-GPU call: where a data-parallel and a tensor-parallel step lose
# time against the prediction. planner exec --trace (predicted and measured
# timelines, per action, CUDA events) of issue 9's GPT-Neo-1.3B dp=2 ZeRO-1
# and tp=2 plans (examples/plans/h200x2-3d), 6 timed steps after 2 warm-up.
# Writes under $OUT/r and packs $OUT/results.tgz.
#   OUT=/some/dir PROFILE=validation/h200x2/calib13/profile-2gpu-refit.json bash scripts/device_x2_traces.sh
. "$(dirname "$0")/device_lib.sh"
build_target planner
for n in neo1.3b-dp2 neo1.3b-tp2; do
  echo "== $n ($(( $(date +%s) - START )) s)"
  timeout 150 ./build-dev/planner exec examples/plans/h200x2-3d/$n.json --steps 6 --warmup 2 \
    ${PROFILE:+--profile "$PROFILE"} --headroom 0 --trace "$R/$n.trace.json" -o "$R/$n.json" 2>&1 | grep -v "warm-up step" | tail -25
done
