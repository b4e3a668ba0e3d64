#!/usr/bin/env bash
# One device call on a GPU machine (two GPUs for two-GPU sweeps): build;
# `planner calibrate` on one GPU and, with two or more GPUs, under
# mpirun -np 2, on the host that then runs the plans; before any plan runs,
# the predictions of every sweep given the profile just measured (`1gpu` or
# `2gpu`); then the sweeps in the order given.
#   OUT=/some/dir bash scripts/device_x2_same_host.sh 'NAME|SWEEP|PROFILE|ONLY|KERNELS' ...
# PROFILE: 1gpu or 2gpu (measured here; predicted before anything runs) or a
# committed profile's path; ONLY: validate --only (may be empty); KERNELS: 1
# for validate --kernels. Writes under $OUT/r: calib/, predicted-NAME/ and
# predicted-NAME.txt, predicted.stamp, NAME/ (device_calibrate.sh's sweep
# part); everything in $OUT/results.tgz (the device tool returns few files).
# Used by scripts/device_x2_heldout3.sh, device_x2_offload4.sh, device_x2_offload5.sh, device_x2_heldout6.sh
# device_x2_offload7.sh, device_x2_heldout9.sh, device_x2_heldout10.sh and device_x2_heldout11.sh.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:?set OUT}
[ $# -ge 1 ] || { echo "usage: OUT=DIR $0 'NAME|SWEEP|PROFILE|ONLY|KERNELS' ..." >&2; exit 2; }
for spec in "$@"; do
  IFS='|' read -r name sweep prof only kern <<<"$spec"
  if [ -z "$name" ] || [ ! -f "$sweep" ] || { [ "$prof" != 1gpu ] && [ "$prof" != 2gpu ] && [ ! -f "$prof" ]; }; then
    echo "device_x2_same_host.sh: bad run '$spec': want NAME|SWEEP (a file)|1gpu, 2gpu or a profile file|ONLY|KERNELS" >&2
    exit 2
  fi
done
R=$OUT/r
mkdir -p "$R"
START=$(date +%s)
left() { echo $(( ${BUDGET:-575} - ($(date +%s) - START) )); }
finish() {
  find "$R" -name results.tgz -delete
  tar czf "$OUT/results.tgz" -C "$R" .
  grep -h "^half\|^fit verdicts\|^== \|CPU AdamW" "$R"/*/log.txt "$R"/calib/calibrate-*.err 2>/dev/null | tail -40
}
trap finish EXIT

OUT=$R/calib PART=calibrate BUDGET=${CAL_BUDGET:-260} bash scripts/device_calibrate.sh >"$R/calib.console.txt" 2>&1
X=./build-dev/planner
profile() { case "$1" in 1gpu|2gpu) echo "$R/calib/profile-$1.json" ;; *) echo "$1" ;; esac; }
for spec in "$@"; do
  IFS='|' read -r name sweep prof only kern <<<"$spec"
  p=$(profile "$prof")
  [ -e "$p" ] || { echo "calibrate did not write $p"; tail -30 "$R/calib.console.txt"; exit 1; }
  case "$prof" in 1gpu|2gpu)
    $X validate "$sweep" -o "$R/predicted-$name" --predict-only --no-plots --profile "$p" --headroom 0 \
      >"$R/predicted-$name.txt" 2>&1 ;;
  esac
done
echo "predictions written $(date -u +%FT%TZ), $(( $(date +%s) - START )) s in" | tee "$R/predicted.stamp"
for spec in "$@"; do
  IFS='|' read -r name sweep prof only kern <<<"$spec"
  t=$(( $(left) - 15 ))
  if [ "$t" -lt 40 ]; then echo "no time left for $name" | tee -a "$R/skipped.txt"; continue; fi
  env OUT="$R/$name" PART=sweep SWEEP="$sweep" PROFILE="$(profile "$prof")" BUILD=0 PLANNER_BIN=$X BUDGET=$t \
    ONLY="$only" KERNELS="${kern:-0}" bash scripts/device_calibrate.sh >"$R/$name.console.txt" 2>&1
done
