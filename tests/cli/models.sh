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
expect_grep "^note: .*not modelled.*rope_theta" "$TMP/err"
[ "$(grep -c '^note:' "$TMP/err")" = 1 ] || { echo "FAIL: one note line expected"; cat "$TMP/err"; fails=$((fails+1)); }

# Mixtral relabelled 'mistral' is read by its fields: the mixture of experts it is ...
expect_exit 0 $P list models
expect_grep "^mixtral-8x7b " "$TMP/out"
expect_exit 2 $P predict --model "$HF/mixtral-8x7b-as-mistral.json" --gpus 8xH100 --seq 4096
expect_grep "mixture of experts is not priced by the cost model yet" "$TMP/err"
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
finish
