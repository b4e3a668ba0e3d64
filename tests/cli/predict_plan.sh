#!/usr/bin/env bash
# predict and plan: documented JSON keys, the plan file round trip, the trace, bench.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
expect_exit 0 $P predict --model gpt2-xl --gpus 2xRTX3090 --strategy dp=2,zero=2,mbs=2 --global-batch 32 --json --trace "$TMP/trace.json"
python3 - "$TMP/out" "$TMP/trace.json" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("step_seconds", "samples_per_second", "tokens_per_second", "tflops_per_gpu", "mfu", "fits",
          "per_gpu_peak_bytes", "breakdown"):
    assert k in j, k
assert j["step_seconds"] > 0 and 0 < j["mfu"] < 1
assert abs(j["samples_per_second"] * j["step_seconds"] - 32) < 1e-6
t = json.load(open(sys.argv[2]))
events = t["traceEvents"] if isinstance(t, dict) else t
assert any(e.get("ph") == "X" for e in events), "trace has complete events"
PY
expect_exit 0 $P plan --model gpt2-xl --gpus 2xRTX3090 --seq 1024 --global-batch 32 --top 3 --json -o "$TMP/plan.json"
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
assert j["candidates_evaluated"] > 0
assert 1 <= len(j["plans"]) <= 3
steps = [p["step_seconds"] for p in j["plans"]]
assert steps == sorted(steps), "best first"
for p in j["plans"]:
    assert "strategy" in p and "tokens_per_second" in p and p["fits"]
PY
# The written plan predicts the same step time through --plan.
best=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["plans"][0]["step_seconds"])' "$TMP/out")
expect_exit 0 $P predict --plan "$TMP/plan.json" --json
python3 - "$TMP/out" "$best" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
assert abs(j["step_seconds"] - float(sys.argv[2])) < 1e-9 * float(sys.argv[2]), (j["step_seconds"], sys.argv[2])
PY
expect_exit 0 $P memory --plan "$TMP/plan.json"
expect_grep "Verdict: FITS" "$TMP/out"
expect_exit 0 $P plan --model gpt2-xl --gpus 2xRTX3090 --seq 1024 --global-batch 32 --explain
expect_grep "pure DP" "$TMP/out"
expect_grep "offload" "$TMP/out"
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090 --top 0
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090 -o /nonexistent-dir/plan.json
expect_exit 0 $P bench --model gpt2 --gpus 2xRTX3090 --seq 1024 --global-batch 8 --repeats 1 --json
expect_grep "candidates_per_second" "$TMP/out"
expect_exit 0 $P list models
expect_grep "llama-2-70b" "$TMP/out"
expect_bad_input $P list toasters
finish
