#!/usr/bin/env bash
# scripts/device_run.sh, the one device runner, without a GPU: every committed
# suite (validation/suites/*.json) is well formed and dry-runs; the commands a
# dry run prints are the ones the suite asks for, in the documented order
# (build, calibrate, the predictions before any plan runs, the sweeps in the
# suite's order); bad suites exit 2 with one line naming what is wrong; a real
# run on a machine with too few GPUs stops before running anything but still
# packs its log into $OUT/results.tgz. Also: every sweep under
# validation/sets/ loads and predicts from its own folder (the model and plan
# paths inside the moved sweeps resolve).
. "$(dirname "$0")/../cli_lib.sh"
RUN="bash $ROOT/scripts/device_run.sh"
n=0
for s in "$ROOT"/validation/suites/*.json; do
  expect_exit 0 $RUN --dry-run "$s" && expect_grep "^\[" "$TMP/out"
  n=$((n+1))
done
[ "$n" -ge 30 ] || { echo "FAIL: only $n suites"; fails=$((fails+1)); }
left=$(ls "$ROOT"/scripts/device_*.sh | grep -v "/device_run.sh$" || true)
[ -z "$left" ] || { echo "FAIL: per-run device scripts remain: $left"; fails=$((fails+1)); }

# A calibrate-then-run suite: calibrate under mpirun -np 2, both predictions
# with the profile just measured, then both sweeps, in that order.
expect_exit 0 $RUN --dry-run "$ROOT/validation/suites/h100x2_heldout12.json"
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import sys
lines = [l for l in open(sys.argv[1]) if l.startswith("[")]
names = [l[1:l.index("]")] for l in lines]
want = ["build", "calibrate-2gpu", "predicted-heldout12-2gpu", "predicted-heldout12-1gpu", "heldout12-2gpu", "heldout12-1gpu"]
assert names == want, names
assert "mpirun --allow-run-as-root -np 2" in lines[1] and "calibrate -o $R/calib/profile-2gpu.json" in lines[1], lines[1]
for l in lines[2:4]:
    assert "--predict-only" in l and "--profile $R/calib/profile-2gpu.json" in l, l
for l in lines[4:]:
    assert "--predict-only" not in l and "--kernels" in l and "validation/sets/sweep_h100" in l, l
PY
# calibrate.measure_s: each calibrate gets --budget (h100x4_calibrate: mpirun -np 4 only, one_gpu false).
expect_exit 0 $RUN --dry-run "$ROOT/validation/suites/h100x4_calibrate.json"
expect_grep "^\[calibrate-4gpu\].*mpirun --allow-run-as-root -np 4 .*calibrate --budget 280 -o .R/calib/profile-4gpu.json" "$TMP/out"
! grep -q "^\[calibrate-1gpu\]" "$TMP/out" || { echo "FAIL: one_gpu false still calibrates one GPU"; fails=$((fails+1)); }
# A suite's predictions come before anything runs, after the calibrate they use.
expect_grep "^\[predicted-heldout20-4gpu\].*--predict-only.*--profile .R/calib/profile-4gpu.json" "$TMP/out"
# A committed-profile suite: no calibrate, no predictions, the sweeps in order.
expect_exit 0 $RUN --dry-run "$ROOT/validation/suites/h200x2_heldout18.json"
expect_grep "^\[run-sweep_h200x2_heldout18\].*--profile validation/h200x2/calib18/profile-2gpu-refit.json" "$TMP/out"
[ "$(grep -c "^\[" "$TMP/out")" = 4 ] || { echo "FAIL: h200x2_heldout18 should be build + 3 sweeps"; cat "$TMP/out"; fails=$((fails+1)); }
! grep -q "calibrate\|predict-only" "$TMP/out" || { echo "FAIL: committed-profile suite calibrates"; fails=$((fails+1)); }
# A ranking suite: the held-out sweep, then each ranking check as `validate
# --rank-question` in the suite's order; its profile is pending (committed
# before the run): a dry run names it, a real run refuses while it is missing.
expect_exit 0 $RUN --dry-run "$ROOT/validation/suites/h100x4_heldout20.json"
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import sys
text = open(sys.argv[1]).read().splitlines()
lines = [l for l in text if l.startswith("[")]
names = [l[1:l.index("]")] for l in lines]
assert names == ["build", "heldout20-4gpu", "rank-llama3.2-3b-gb16", "rank-llama3.2-1b-seq8192", "rank-llama2-7b-gb32"], names
assert "--rank-question '\"'\"'--model llama-2-7b --gpus 4xH100 --global-batch 32'\"'\"' --top 5 -o $R/rank-llama2-7b-gb32" in lines[4], lines[4]
assert all("--profile validation/h100x4/calib20/profile-4gpu.json" in l for l in lines[1:]), lines
PY
# "pending": a profile the suite's earlier call will make may be missing on a dry run (named).
python3 - "$ROOT/validation/suites/h100x4_heldout20.json" "$TMP/pending.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
later = "validation/h100x4/calib-later/profile-4gpu.json"
s["pending"] = [later]
for w in s["sweeps"] + s["rankings"]:
    w["profile"] = later
json.dump(s, open(sys.argv[2], "w"))
PY
expect_exit 0 $RUN --dry-run "$TMP/pending.json"
expect_grep "^# pending validation/h100x4/calib-later/profile-4gpu.json" "$TMP/out"
# Baselines and per-GPU exec.
expect_exit 0 $RUN --dry-run "$ROOT/validation/suites/h200x2_dist_dp.json"
expect_grep "^\[fsdp2-r0\].*torchrun --nproc_per_node 2 benchmarks/pytorch_dist_reference.py .* --mode fsdp2 --reshard-after-forward 0" "$TMP/out"
expect_grep "^\[neo-dp1\].* CUDA_VISIBLE_DEVICES=0 .*exec examples/plans/h200x2/neo1.3b-dp1.json" "$TMP/out"

# Bad suites: exit 2, one line naming the fault.
base='"format": "planner-device-suite", "version": 1, "gpus": 2'
bad() {  # bad JSON-BODY PATTERN
  echo "{$base, $1}" >"$TMP/bad.json"
  expect_bad_input $RUN --dry-run "$TMP/bad.json" && expect_grep "$2" "$TMP/err"
}
bad '"calibrate": {"ranks": 2, "budget_s": 100, "measure_s": 200}' "measure_s"
bad '"sweeps": [{"name": "a", "file": "validation/sets/sweep_1gpu.json", "kernel": true}]' "unknown key 'kernel'"
bad '"sweeps": [{"name": "a", "file": "validation/sets/no_such.json"}]' "no file validation/sets/no_such.json"
bad '"sweeps": [{"name": "a", "file": "validation/sets/sweep_1gpu.json", "profile": "2gpu"}]' "not measured"
bad '"calibrate": {"ranks": 2}, "sweeps": [{"name": "a", "file": "validation/sets/sweep_1gpu.json"}, {"name": "a", "file": "validation/sets/sweep_1gpu.json"}]' "used twice"
bad '"calibrate": {"ranks": 4}' "ranks"
bad '"exec": [{"name": "a b", "plan": "examples/plans/tiny-cpu.json"}]' "name"
bad '"baselines": [{"name": "a", "plan": "examples/plans/tiny-cpu.json", "mode": "deepspeed"}]' "mode"
bad '"rankings": [{"name": "r", "question": "--gpus 4xH100"}]' "question"
bad '"rankings": [{"name": "r", "question": "--model gpt2 --gpus 2xH100", "top": 1}]' "top"
bad '"rankings": [{"name": "r", "question": "--model gpt2 --gpus 2xH100", "profile": "no/such.json"}]' "no file no/such.json"
bad '"pending": "x.json", "commands": [{"name": "c", "run": "true"}]' "pending"
echo '{"format": "planner-device-suite", "version": 1, "gpus": 1}' >"$TMP/empty.json"
expect_bad_input $RUN --dry-run "$TMP/empty.json" && expect_grep "nothing to run" "$TMP/err"
expect_bad_input $RUN --dry-run "$TMP/nonexistent.json"
expect_bad_input env -u OUT $RUN "$ROOT/validation/suites/h100_heldout19.json" && expect_grep "OUT" "$TMP/err"

# A real run needing more GPUs than this machine has: stops, says so, packs the log.
if ! command -v nvidia-smi >/dev/null || [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 8 ]; then
  echo "{$base, \"gpus\": 8, \"build\": false, \"commands\": [{\"name\": \"c\", \"run\": \"touch \$R/ran\"}]}" | sed 's/"gpus": 2, //' >"$TMP/eight.json"
  expect_exit 2 env OUT="$TMP/o" $RUN "$TMP/eight.json" && expect_grep "needs 8 GPUs" "$TMP/out"
  tar tzf "$TMP/o/results.tgz" | grep -q "log.txt" || { echo "FAIL: no log.txt in results.tgz"; fails=$((fails+1)); }
  [ ! -e "$TMP/o/r/ran" ] || { echo "FAIL: a step ran on a machine without the GPUs"; fails=$((fails+1)); }
fi

# A suite whose pending file is still missing: a real run stops before any step.
echo "{$base, \"build\": false, \"pending\": [\"validation/no_such_profile.json\"], \"sweeps\": [{\"name\": \"s\", \"file\": \"validation/sets/sweep_1gpu.json\", \"profile\": \"validation/no_such_profile.json\"}]}" >"$TMP/pend.json"
expect_exit 0 $RUN --dry-run "$TMP/pend.json" && expect_grep "^# pending validation/no_such_profile.json \(missing" "$TMP/out"
expect_exit 2 env OUT="$TMP/o3" $RUN "$TMP/pend.json" && expect_grep "pending files are not committed yet" "$TMP/out"
[ ! -e "$TMP/o3/r/s.txt" ] || { echo "FAIL: a step ran with a pending file missing"; fails=$((fails+1)); }

# A real run on a (pretend) two-GPU machine: a stub nvidia-smi lists two GPUs.
# Steps run in order with $R set, a step past its own limit is stopped (124),
# a step the budget cannot fit is skipped and named, and everything is packed.
mkdir -p "$TMP/bin"
printf '#!/bin/sh\ncase "$*" in *-L*) echo "GPU 0: Stub"; echo "GPU 1: Stub" ;; esac\n' >"$TMP/bin/nvidia-smi"
chmod +x "$TMP/bin/nvidia-smi"
cat >"$TMP/two.json" <<'JSON'
{"format": "planner-device-suite", "version": 1, "gpus": 2, "build": false,
 "setup": [{"name": "first", "run": "echo one > $R/first.out"}],
 "commands": [{"name": "slow", "run": "sleep 30; touch $R/slow.out", "timeout_s": 1},
              {"name": "pause", "run": "sleep 10"},
              {"name": "late", "run": "touch $R/late.out"}]}
JSON
expect_exit 0 env PATH="$TMP/bin:$PATH" OUT="$TMP/o2" $RUN --budget 64 "$TMP/two.json"
expect_grep "^== slow: exit 124" "$TMP/out"
expect_grep "^== no time left for late" "$TMP/out"
[ "$(cat "$TMP/o2/r/first.out" 2>/dev/null)" = one ] || { echo "FAIL: setup step did not run with \$R"; fails=$((fails+1)); }
[ ! -e "$TMP/o2/r/slow.out" ] && [ ! -e "$TMP/o2/r/late.out" ] || { echo "FAIL: a stopped or skipped step finished"; fails=$((fails+1)); }
expect_grep "^late$" "$TMP/o2/r/skipped.txt"
tar tzf "$TMP/o2/results.tgz" >"$TMP/list"
expect_grep "first.out" "$TMP/list"
expect_grep "log.txt" "$TMP/list"

# Every sweep predicts from validation/sets/ (its relative model and plan paths resolve).
for s in "$ROOT"/validation/sets/*.json; do
  expect_exit 0 "$PLANNER" validate "$s" -o "$TMP/p-$(basename "$s" .json)" --predict-only --no-plots -q
done
finish
