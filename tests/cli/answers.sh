#!/usr/bin/env bash
# The planner's first answers: memory of a plan, the largest model, and --help.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
expect_exit 0 $P --help && expect_grep "max-model" "$TMP/out"
for c in memory max-model predict plan bench exec; do
  expect_exit 0 $P $c --help && expect_grep "Examples" "$TMP/out"
done
expect_exit 0 $P memory --model gpt2-xl --gpus 2xRTX3090 --strategy dp=2,zero=1,mbs=2,ckpt=full
expect_grep "Verdict: FITS" "$TMP/out"
expect_exit 0 $P memory --model llama-2-7b --gpus 1xRTX3090 --strategy mbs=1
expect_grep "DOES NOT FIT: GPU peak .* exceeds .* by .*optimizer_states" "$TMP/out"
expect_exit 0 $P memory --model gpt2-xl --gpus 2xRTX3090 --strategy dp=2,zero=1,mbs=2,ckpt=full --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("fits", "per_gpu_peak_bytes", "host_peak_bytes", "breakdown"):
    assert k in j, k
assert j["fits"] is True
assert sum(j["breakdown"].values()) == j["per_gpu_peak_bytes"], "breakdown sums to the peak"
PY
expect_exit 0 $P max-model --gpus 2xRTX3090 --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("params", "model", "strategy", "per_gpu_peak_bytes", "next_up"):
    assert k in j, k
assert 1e8 < j["params"] < 1e11
assert j["per_gpu_peak_bytes"] <= 24 * 2**30
assert j["next_up"]["params"] > j["params"]
PY
cp "$TMP/out" "$TMP/none.json"
expect_exit 0 $P max-model --gpus 2xRTX3090 --offload all --json
python3 - "$TMP/none.json" "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert b["params"] > a["params"], "offload must allow a larger model"
PY
expect_exit 0 $P max-model --gpus 2xRTX3090
expect_grep "Next size up" "$TMP/out"
finish
