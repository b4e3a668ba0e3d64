#!/usr/bin/env bash
# LoRA and QLoRA (issue 32, item 2): the choice, max-model, plan, compare, memory, export.
. "$(dirname "$0")/../cli_lib.sh"
P=$(realpath "$PLANNER"); ROOT=$(realpath "$ROOT")
cd "$ROOT" || exit 1
json() { python3 -c "import json,sys; j=json.load(open('$TMP/out')); $1" || { echo "FAIL: $1"; fails=$((fails+1)); }; }

# The choice: refused with one line when wrong.
expect_bad_input $P memory --model llama-2-7b --gpus 1xH100 --strategy finetune=dora
expect_grep "finetune='dora' is not one of full\|lora\|qlora" "$TMP/err"
expect_bad_input $P memory --model llama-2-7b --gpus 1xH100 --strategy lora_r=8
expect_grep "need finetune=lora or finetune=qlora" "$TMP/err"
expect_bad_input $P memory --model llama-2-7b --gpus 2xH100 --strategy tp=2,sp=1,finetune=qlora
expect_grep "finetune=qlora with sp=1 is not executed" "$TMP/err"
expect_bad_input $P max-model --gpus 2xRTX3090 --finetune qlora,lora_targets=embedding
expect_bad_input $P plan --model llama-2-7b --gpus 1xH100 --finetune lorax

# QLoRA at seq 512, as in the QLoRA paper (Dettmers et al. 2023: 33B on one 24 GB GPU, 65B on one 48 GB GPU).
expect_exit 0 $P max-model --gpus 1xRTX3090 --finetune qlora --seq 512 --json
json "p = j['params']; assert 25e9 <= p <= 45e9, p"
expect_exit 0 $P max-model --gpus 1xA6000 --finetune qlora --seq 512 --json
json "p = j['params']; assert 55e9 <= p <= 90e9, p"
expect_exit 0 $P max-model --gpus 2xRTX3090 --finetune qlora --seq 512 --json
json "p = j['params']; assert 50e9 <= p <= 90e9, p; f = j['finetune']; assert f['mode'] == 'qlora' and f['peak_bytes'] <= f['usable_bytes'], f"
json "f = j['finetune']; assert abs(f['nf4_bits_per_param'] - 4.127) < 1e-3 and f['adapter_params'] > 0, f"
expect_exit 0 $P max-model --gpus 2xRTX3090 --finetune qlora --seq 512
expect_grep "^assumed: qlora: adapters of rank 16" "$TMP/out"
expect_grep "^  frozen base .* x 4.127 bits \(NF4, double-quantized absmax\)" "$TMP/out"
expect_grep "^  adapters +r=16 on qkv\+o\+mlp" "$TMP/out"
expect_grep "^  total .* usable \(fits\)" "$TMP/out"
# Fine-tuning fits more than full training, LoRA less than QLoRA.
expect_exit 0 $P max-model --gpus 2xRTX3090 --seq 512 --json
full=$(python3 -c "import json;print(json.load(open('$TMP/out'))['params'])")
expect_exit 0 $P max-model --gpus 2xRTX3090 --finetune lora --seq 512 --json
json "assert $full < j['params'] < 50e9, j['params']"

# memory and predict take the strategy keys; plan and compare take --finetune.
expect_exit 0 $P memory --model llama-2-7b --gpus 1xRTX3090 --strategy finetune=qlora,ckpt=full,mbs=1 --seq 512 --global-batch 1 --json
json "assert j['fits'] and j['finetune']['frozen_base_bytes'] < 4.2e9, j['finetune']"
# No weight gradients for the base: a LoRA step is shorter than full training's, its model FLOPs 4N + 6 adapters per token.
expect_exit 0 $P predict --model llama-2-7b --gpus 1xH100 --strategy mbs=1,ckpt=full --seq 2048 --global-batch 8 --json
full=$(python3 -c "import json;print(json.load(open('$TMP/out'))['step_seconds'])")
expect_exit 0 $P predict --model llama-2-7b --gpus 1xH100 --strategy finetune=lora,mbs=1,ckpt=full --seq 2048 --global-batch 8 --json
json "assert j['step_seconds'] < $full, (j['step_seconds'], $full)"
expect_grep "^ *\"finetune\": \"lora\"" "$TMP/out"
expect_exit 0 $P plan --model llama-2-7b --gpus 1xRTX3090 --finetune qlora --seq 512 --global-batch 8 --top 2 --json -q
json "s = j['plans'][0]['strategy']; assert s.endswith('finetune=qlora,lora_r=16,lora_alpha=32,lora_targets=qkv+o+mlp'), s"
expect_exit 0 $P compare --model llama-2-7b --gpus 1xRTX3090,1xA6000 --finetune qlora --seq 512 --global-batch 8
expect_grep "^assumed: qlora: adapters" "$TMP/out"

# Export: a PEFT LoraConfig; the other engines refuse a fine-tuning plan.
expect_exit 0 $P memory --model llama-2-7b --gpus 1xRTX3090 --strategy finetune=qlora,lora_r=64,ckpt=full --seq 512 --global-batch 1 -o "$TMP/q.json"
expect_exit 0 $P export "$TMP/q.json" --to peft --json
json "c = j['config']; assert c['lora_config']['r'] == 64 and c['lora_config']['target_modules'] == ['q_proj','k_proj','v_proj','o_proj','gate_proj','up_proj','down_proj'], c"
json "c = j['config']; assert c['bnb_config']['bnb_4bit_quant_type'] == 'nf4' and c['bnb_config']['bnb_4bit_use_double_quant'], c"
expect_bad_input $P export "$TMP/q.json" --to deepspeed
expect_grep "finetune=qlora is not modelled for this engine" "$TMP/err"
expect_exit 0 $P memory --model llama-2-7b --gpus 1xRTX3090 --strategy ckpt=full --seq 512 --global-batch 1 -o "$TMP/f.json"
expect_bad_input $P export "$TMP/f.json" --to peft
# exec counts a LoRA step's FLOPs as the prediction does (no weight gradients of
# the frozen base): its TFLOP/s and MFU are not those of full training.
if [ "${PLANNER_HAS_RUNTIME:-OFF}" = ON ]; then
  echo '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 512, "max_position_embeddings": 128}' > "$TMP/tiny-llama.json"
  expect_exit 0 $P predict --model "$TMP/tiny-llama.json" --gpus 1xH100 --strategy finetune=lora,lora_r=4,mbs=2,precision=fp32 \
    --seq 64 --global-batch 2 -o "$TMP/lora-plan.json"
  expect_exit 0 $P exec "$TMP/lora-plan.json" --steps 2 --warmup 1 --device cpu -q -o "$TMP/lora-r.json"
  python3 - "$TMP/lora-r.json" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1]))
m, p = r["measurement"], r["prediction"]
# By hand: tokens 128; matmul params 2 x (4 x 64^2 + 3 x 64 x 128) + 64 x 512 = 114688;
# adapters r 4 on q, k, v, o, gate, up, down: 2 x 4 x (4 x 128 + 2 x 192 + 192) = 8704.
# Full training 3 x (2 x 114688 + 4 x 2 x 64 x 64) x 128; LoRA less 2 x 128 x 114688, plus 6 x 128 x 8704.
full = 3 * (2 * 114688 + 4 * 2 * 64 * 64) * 128
lora = full - 2 * 128 * 114688 + 6 * 128 * 8704
assert abs(p["model_flops_per_step"] - lora) < 1, (p["model_flops_per_step"], lora)
assert abs(m["model_flops_per_step"] - lora) < 1, (m["model_flops_per_step"], lora)
PY
fi
finish
