#!/usr/bin/env bash
# Device run: are the one-GPU plans of held-out set 18 faster than predicted
# because `planner validate` times them within seconds of a cool start? The
# same sweep (examples/sweep_h200_heldout18.json, predictions committed in
# validation/h200x2/heldout18) twice with the same profile: as set 18 ran it
# (2 warm-up + 5 timed steps), then with 30 warm-up steps (seconds of
# sustained load before the timing, as a long training run is in); nvidia-smi
# logs the SM clock, power and temperature every 200 ms (clocks.csv).
#   OUT=/some/dir bash scripts/device_h200_warm_state.sh
. "$(dirname "$0")/device_lib.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
build_target planner
P=validation/h200x2/calib18/profile-2gpu-refit.json
S=examples/sweep_h200_heldout18.json
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 200 >"$R/clocks.csv" 2>&1 &
smi=$!
for run in short:2 warm:30; do
  n=${run%%:*} w=${run##*:}
  echo "== $n: $w warm-up steps ($(( $(date +%s) - START )) s, $(date +%T))"
  timeout 330 ./build-dev/planner validate "$S" -o "$R/$n" --profile "$P" --headroom 0 --gpus 1xH200 \
    --warmup "$w" --steps 5 --no-plots --timeout 120 >"$R/$n.txt" 2>&1
  echo "exit $?"
  grep -A10 "^plan " "$R/$n.txt" | head -11
done
kill $smi
echo "done in $(( $(date +%s) - START )) s"
