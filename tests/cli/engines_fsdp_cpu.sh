#!/usr/bin/env bash
# scripts/engines/launch.sh with `planner export --to fsdp` on CPU (gloo, two
# ranks): the export's launch line runs as written (scripts/engines/fsdp_train.py),
# for FSDP2 ZeRO-3 over dp=2 and for TP=2 with sequence parallelism (the
# exported parallelize plan applied by module name); each run writes its
# ENGINE_RESULT with three steps, finite step times (and the host's side of
# them) and a finite loss, and
# launch.sh puts the --engine fsdp predictions beside it. Skips (77) without torch.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
python3 -c 'import torch, torch.distributed.fsdp' 2>/dev/null || { echo "SKIP: torch is not installed"; exit 77; }
expect_exit 2 bash "$ROOT/scripts/engines/launch.sh" x "$ROOT/examples/plans/tiny-cpu.json" tensorflow
expect_grep "engine must be deepspeed, megatron or fsdp" "$TMP/err"
launch() {
  (cd "$ROOT" && X="$P" R="$TMP/r" PLANNER_ENGINE_STEPS=3 PLANNER_ENGINE_WARMUP=1 OMP_NUM_THREADS=1 \
     timeout 240 bash scripts/engines/launch.sh "$1" "examples/plans/$1.json" fsdp) >"$TMP/$1.log" 2>&1
}
for plan in tiny-cpu-dp2-zero3 tiny-cpu-tp2-sp; do
  # A gloo rank of torch's CPU build sometimes dies by a signal (SIGABRT) on
  # this 2-core machine: once in the sanitize pass of a CI run (2026-11-28),
  # 0 of 10 local reruns; the fsdp_train barrier before teardown made it rarer
  # (962277d). One relaunch, said on the output, for a death by signal only;
  # a trainer's own failure (exit 1 with a Python error) fails at once.
  if ! launch "$plan"; then
    if grep -q "Signal [0-9]* (SIG" "$TMP/$plan.log"; then
      echo "note: $plan: a rank died by a signal; relaunching once"; grep -m2 "Signal" "$TMP/$plan.log"
      launch "$plan" || { echo "FAIL: $plan"; tail -20 "$TMP/$plan.log"; fails=$((fails+1)); continue; }
    else
      echo "FAIL: $plan"; tail -20 "$TMP/$plan.log"; fails=$((fails+1)); continue
    fi
  fi
  expect_grep "^launch: torchrun --nproc-per-node 2 scripts/engines/fsdp_train.py --fsdp-config" "$TMP/$plan.log"
  python3 - "$TMP/r/engines/$plan.result.json" "$TMP/r/engines/$plan.predict.json" <<'PY' || fails=$((fails+1))
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["engine"] == "fsdp" and r["steps"] == 3 and r["world_size"] == 2, r
assert len(r["step_s"]) == 2 and all(t > 0 and math.isfinite(t) for t in r["step_s"]), r
# The host's side (StepTimer.mark/stop): never longer than the step's wall time, and the micro-batches'
# and the tail's medians within the step's host time.
assert len(r["host_step_s"]) == 2 and all(0 < h <= t for h, t in zip(r["host_step_s"], r["step_s"])), r
assert 0 < r["median_mb_host_s"] <= max(r["host_step_s"]) and 0 <= r["median_tail_host_s"] <= max(r["host_step_s"]), r
# Random tokens: a model initialised as GPT-2/Llama are (embeddings N(0, 0.02))
# starts at about ln(vocab) and cannot learn them; torch's N(0, 1) embeddings
# gave losses far above it (validation/engines/h100x4).
vocab = json.load(open(sys.argv[2]))["plan"]["model"]["vocab"]
assert abs(r["final_loss"] - math.log(vocab)) < 1.0, (r["final_loss"], math.log(vocab))
assert json.load(open(sys.argv[2]))["step_seconds"] > 0
PY
  passes=$((passes+1))
done
finish
