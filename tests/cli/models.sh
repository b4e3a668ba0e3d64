#!/usr/bin/env bash
# Today's models through the command line: Hugging Face configs read by their
# fields, what is not modelled named or refused, Mistral's sliding window.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"; HF="$ROOT/tests/data/hf"
step() { python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["step_seconds"])' "$TMP/out"; }

# A Qwen2 config (model_type 'qwen2', once refused) is accepted, with its q/k/v biases.
expect_exit 0 $P predict --model "$HF/qwen2.5-7b.json" --gpus 8xH100 --strategy tp=2,mbs=1 --seq 4096 --global-batch 16 --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
m = json.load(open(sys.argv[1]))["plan"]["model"]
assert m["qkv_bias"] is True and m["out_bias"] is False, m
assert m["layers"] == 28 and m["kv_heads"] == 4, m
PY
# ...and what it holds and the model does not price is named in one note line.
expect_grep "^note: .*not modelled.*use_mrope" "$TMP/err"
# rope_theta is read (the Megatron export passes the rotary base on), not noted.
! grep -q rope_theta "$TMP/err" || { echo "FAIL: rope_theta noted as not modelled"; fails=$((fails+1)); }
[ "$(grep -c '^note:' "$TMP/err")" = 1 ] || { echo "FAIL: one note line expected"; cat "$TMP/err"; fails=$((fails+1)); }

# Mixtral relabelled 'mistral' is read by its fields: the mixture of experts it is,
# priced, with its token imbalance stated as an assumption.
expect_exit 0 $P list models
expect_grep "^mixtral-8x7b " "$TMP/out"
expect_exit 0 $P predict --model "$HF/mixtral-8x7b-as-mistral.json" --gpus 8x8xH100 --strategy tp=2,sp=1,ep=8,zero=1,mbs=1 --seq 4096 --global-batch 128 --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
m = j["plan"]["model"]
assert m["moe"]["experts"] == 8 and m["moe"]["top_k"] == 2, m
assert j["plan"]["strategy"]["ep"] == 8, j["plan"]["strategy"]
assert any("token imbalance 1" in a for a in j["assumed"]), j["assumed"]
PY
# --moe-imbalance: the busiest expert's load; a slower step; refused for a dense model.
args=(--model mixtral-8x7b --gpus 8x8xH100 --strategy tp=2,sp=1,ep=8,zero=1,mbs=1 --seq 4096 --global-batch 128 --json)
expect_exit 0 $P predict "${args[@]}"; bal=$(step)
expect_exit 0 $P predict "${args[@]}" --moe-imbalance 2; skew=$(step)
python3 -c "import sys; b,s=map(float,sys.argv[1:]); assert s > b, (b, s)" "$bal" "$skew" || fails=$((fails+1))
expect_bad_input $P predict --model mistral-7b --gpus 8xH100 --moe-imbalance 2
expect_grep "not a mixture of experts" "$TMP/err"
expect_bad_input $P predict "${args[@]}" --moe-imbalance 9
expect_grep "moe.imbalance=9" "$TMP/err"
expect_bad_input $P predict --model mistral-7b --gpus 8xH100 --strategy ep=2
expect_grep "needs a mixture-of-experts model" "$TMP/err"
# The search plans ep; the Megatron export carries the MoE arguments.
expect_exit 0 $P plan --model mistralai/Mixtral-8x7B-v0.1 --gpus 8x8xH100 --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
assert any(",ep=" in p["strategy"] for p in j["plans"]), [p["strategy"] for p in j["plans"]]
PY
expect_exit 0 $P predict --model mixtral-8x7b --gpus 8x8xH100 --strategy tp=2,sp=1,ep=4,zero=1,mbs=1 --seq 4096 --global-batch 128 -o "$TMP/moe_plan.json"
expect_exit 0 $P export "$TMP/moe_plan.json" --to megatron --with-te -o "$TMP/megatron.args"  # ep with tp needs sp: TE
expect_grep "^--expert-model-parallel-size 4" "$TMP/megatron.args"
expect_grep "^--num-experts 8" "$TMP/megatron.args"
expect_grep "^--moe-router-topk 2" "$TMP/megatron.args"
# ... and the table shows it.
expect_exit 0 $P plan --model mistralai/Mixtral-8x7B-v0.1 --gpus 8x8xH100
expect_grep ",ep=[0-9]" "$TMP/out"
# DeepSeek's latent attention: refused by name, in one line.
expect_bad_input $P predict --model deepseek-ai/DeepSeek-V2-Lite --gpus 8xH100
expect_grep "latent attention" "$TMP/err"

# Mistral's sliding window changes the step time at seq 32768 (attention over
# 4096 keys instead of up to 32768), by name and by config alike.
args=(--gpus 8xH100 --strategy tp=8,sp=1,mbs=1,ckpt=selective --seq 32768 --global-batch 8 --json)
expect_exit 0 $P predict --model mistral-7b "${args[@]}"; win=$(step)
expect_exit 0 $P predict --model "$HF/mistral-7b.json" "${args[@]}"; win_cfg=$(step)
expect_exit 0 $P predict --model "$HF/mistral-7b-no-window.json" "${args[@]}"; nowin=$(step)
python3 - "$win" "$win_cfg" "$nowin" <<'PY' || fails=$((fails+1))
import sys
win, win_cfg, nowin = map(float, sys.argv[1:])
assert win == win_cfg, (win, win_cfg)
assert win < 0.9 * nowin, f"the window should save >10% at seq 32768: {win} vs {nowin}"
PY

# Presets of today's models by their Hugging Face names.
for m in Qwen/Qwen2.5-7B meta-llama/Llama-3.1-8B mistralai/Mistral-7B-v0.1 google/gemma-2-9b Qwen/Qwen3-8B; do
  expect_exit 0 $P memory --model "$m" --gpus 8xH100 --strategy zero=3,mbs=1 --seq 4096 --json
done
expect_exit 0 $P list models
expect_grep "^gemma-2-27b " "$TMP/out"
# What planner exec does not run (specs/runtime_gap.hpp): the default engine
# ranks every strategy the cost model prices and names the shown plans the
# runtime refuses (here expert parallelism with cp > 1; a MoE model with
# ZeRO-1/2/3, expert parallelism and sequence parallelism run); --runnable
# keeps only what it runs; --json carries each plan's exec_gap.
MIX=(--model mistralai/Mixtral-8x7B-v0.1 --gpus 8xH100 --top 10 --seq 16384)
expect_exit 0 $P plan "${MIX[@]}"
expect_grep "^note: planner exec does not run #.*expert parallelism \(ep=[0-9]+\) with cp=1 only; this plan has cp=2" "$TMP/out"
expect_exit 0 $P plan "${MIX[@]}" --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
plans = json.load(open(sys.argv[1]))["plans"]
gapped = [p for p in plans if "exec_gap" in p]
assert gapped, "no shown plan carries exec_gap"
for p in gapped:
    s = dict(kv.split("=") for kv in p["strategy"].split(","))
    assert int(s.get("ep", 1)) > 1 and int(s.get("cp", 1)) > 1, p["strategy"]
def kv(p): return dict(x.split("=") for x in p["strategy"].split(","))
# ep > 1 with ZeRO-1/2/3 is shown and runs; so does tp > 1 with sp = 1.
assert any(int(kv(p).get("ep", 1)) > 1 and kv(p)["zero"] == "3" and "exec_gap" not in p for p in plans), \
    [p["strategy"] for p in plans]
assert any(kv(p).get("sp") == "1" and kv(p)["tp"] != "1" and "exec_gap" not in p for p in plans), \
    [p["strategy"] for p in plans]
PY
expect_exit 0 $P plan "${MIX[@]}" --runnable --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, re, sys
plans = json.load(open(sys.argv[1]))["plans"]
assert plans, "--runnable left nothing"
for p in plans:
    s = dict(kv.split("=") for kv in p["strategy"].split(","))
    assert "exec_gap" not in p, p
    assert int(s.get("ep", 1)) == 1 or int(s.get("cp", 1)) == 1, p["strategy"]       # ep > 1 only with cp = 1
PY
# Several clusters: the merged list's own numbers (here plans with ep and cp).
expect_exit 0 $P plan --model mistralai/Mixtral-8x7B-v0.1 --gpus 8xH100,4x8xH100 --seq 16384 --global-batch 8 --top 10
expect_grep "^note: planner exec does not run #.* of this list" "$TMP/out"
expect_bad_input $P plan "${MIX[@]}" --runnable --engine megatron
expect_grep "runnable.*--engine ours" "$TMP/err"
# predict names it too, and still answers.
expect_exit 0 $P predict --model mistralai/Mixtral-8x7B-v0.1 --gpus 8xH100 --strategy dp=4,cp=2,ep=2,zero=1 --seq 8192
expect_grep "planner exec does not run this plan .*expert parallelism \\(ep=2\\) with cp=1 only; this plan has cp=2" "$TMP/out"
# Expert parallelism with ZeRO-1 and ZeRO-3, and tp with sp, run: no such note.
for st in dp=8,ep=8,zero=1 dp=8,ep=8,zero=3 dp=4,tp=2,ep=2,sp=1,zero=1; do
  expect_exit 0 $P predict --model mistralai/Mixtral-8x7B-v0.1 --gpus 8xH100 --strategy $st --seq 4096
  if grep -q "planner exec does not run" "$TMP/out"; then echo "FAIL: $st still named as not run"; fails=$((fails+1)); fi
done
finish
