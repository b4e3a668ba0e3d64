#!/usr/bin/env bash
# A stuck peer ends the job: runs dist_timeout_probe on 2 ranks and checks that
# mpirun exits non-zero within 20 s and that stderr has rank 0's one line.
#   check_timeout.sh PROBE DEVICE MPIEXEC [MPIEXEC_FLAGS...]
# Exit 77 (ctest: skipped) when the probe reports too few GPUs.
set -u
probe=$1; dev=$2; shift 2
out=$(mktemp); err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
start=$(date +%s)
timeout 100 "$@" -np 2 "$probe" "$dev" >"$out" 2>"$err"
rc=$?
elapsed=$(( $(date +%s) - start ))
fail() { echo "check_timeout ($dev): $*" >&2; echo "--- stdout" >&2; cat "$out" >&2; echo "--- stderr" >&2; cat "$err" >&2; exit 1; }
if grep -q '^skip:' "$out"; then cat "$out"; exit 77; fi
[ "$rc" -ne 0 ] || fail "the job exited 0; a stuck peer must end it with a failure"
[ "$rc" -ne 124 ] || fail "the job hung (killed after 100 s)"
[ "$elapsed" -le 20 ] || fail "the job took $elapsed s to end (timeout 2 s; expected under 20 s)"
want="planner: rank 0: all_reduce on group world {0,1} did not finish within 2 s (a peer is dead or stuck); ending the job"
grep -qxF "$want" "$err" || fail "stderr lacks the line: $want"
n=$(grep -c '^planner: ' "$err")
[ "$n" -eq 1 ] || fail "expected one 'planner:' line on stderr, got $n"
echo "ok ($dev): the job ended in $elapsed s with exit $rc and: $want"
