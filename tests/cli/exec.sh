#!/usr/bin/env bash
# planner exec on this machine (the CPU in CI): measured beside predicted, the
# result file, and bad plans refused with exit code 2 and nothing written.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
if [ "${PLANNER_HAS_RUNTIME:-OFF}" != ON ]; then
  expect_exit 1 $P exec "$ROOT/examples/plans/tiny-cpu.json" && expect_grep "without LibTorch" "$TMP/err"
  finish; exit $?
fi
expect_exit 0 $P exec "$ROOT/examples/plans/tiny-cpu.json" --steps 3 --warmup 1 --device cpu -q -o "$TMP/result.json"
expect_grep "predicted" "$TMP/out"
python3 - "$TMP/result.json" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1]))
for k in ("plan", "prediction", "measurement", "machine"):
    assert k in r, k
m = r["measurement"]
assert len(m["losses"]) == 4 and all(l == l for l in m["losses"]), "one finite loss per step"
assert m["step_seconds"]["median"] > 0
# /proc/stat's steal over the timed steps (Linux): a share of the CPU time
st = m["cpu_steal_fraction"]
assert st is not None and 0 <= st <= 1, st
PY
# A plan that is not the search's best (full recomputation), written by predict -o, runs as it is.
echo '{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 512, "n_positions": 128}' > "$TMP/tiny.json"
expect_exit 0 $P predict --model "$TMP/tiny.json" --gpus 1xH100 --strategy mbs=2,ckpt=full,precision=fp32 --seq 64 \
  --global-batch 4 -o "$TMP/p.json"
expect_exit 0 $P exec "$TMP/p.json" --steps 2 --warmup 1 --device cpu -q -o "$TMP/r5.json"
python3 - "$TMP/r5.json" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1]))
s = r["plan"]["strategy"]
assert s["ckpt"] == "full" and s["mbs"] == 2 and s["gas"] == 2, s
assert len(r["measurement"]["losses"]) == 3
PY
# Today's dense decoders run: a Mistral-shaped config with a 16-key window at
# seq 64, a Qwen2-shaped one (q/k/v biases, tied, rope base 1e6), a
# Qwen3-shaped one (head_dim 24 != 64/4, q/k norms).
for cfg in '{"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512, "sliding_window": 16}' \
           '{"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512, "tie_word_embeddings": true, "rope_theta": 1000000.0}' \
           '{"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "intermediate_size": 128, "vocab_size": 512}' \
           '{"model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512, "sliding_window": 16, "final_logit_softcapping": 30.0}' \
           '{"model_type": "gemma3_text", "num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512, "sliding_window": 16, "sliding_window_pattern": 3}'; do
  echo "$cfg" > "$TMP/today.json"
  expect_exit 0 $P predict --model "$TMP/today.json" --gpus 1xH100 --strategy mbs=2,precision=fp32 --seq 64 \
    --global-batch 2 -o "$TMP/today-plan.json"
  expect_exit 0 $P exec "$TMP/today-plan.json" --steps 2 --warmup 1 --device cpu -q -o "$TMP/today-r.json"
done
# What the runtime does not build is refused by name before any work:
# windows on an irregular list of layers.
echo '{"model_type": "gemma3_text", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention", "full_attention", "sliding_attention"]}' > "$TMP/gemma.json"
expect_exit 0 $P predict --model "$TMP/gemma.json" --gpus 1xH100 --strategy mbs=2,precision=fp32 --seq 64 \
  --global-batch 2 -o "$TMP/gemma-plan.json"
expect_bad_input $P exec "$TMP/gemma-plan.json" --device cpu -o "$TMP/gemma-r.json" && expect_grep "pattern of layers" "$TMP/err"
[ ! -e "$TMP/gemma-r.json" ] || { echo "FAIL: a refused exec wrote its result file"; fails=$((fails+1)); }
# Fine-tuning (LoRA, QLoRA): the Engine trains the adapters on a frozen base;
# memory measured and reported as for any plan: the parameters hold the base
# (QLoRA: its layer matrices in NF4), the gradients only the adapters'.
for ft in lora qlora; do
  expect_exit 0 $P predict --model "$TMP/tiny.json" --gpus 1xH100 --strategy mbs=2,gas=2,precision=fp32,finetune=$ft,lora_r=4 \
    --seq 64 --global-batch 4 -o "$TMP/$ft.json"
  expect_exit 0 $P exec "$TMP/$ft.json" --steps 2 --warmup 1 --device cpu -q -o "$TMP/$ft.result.json"
  python3 - "$TMP/$ft.result.json" "$ft" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1]))
assert r["plan"]["strategy"]["finetune"] == sys.argv[2], r["plan"]["strategy"]
m = r["measurement"]
assert len(m["losses"]) == 3 and all(l == l for l in m["losses"]), m["losses"]
mem = json.dumps(m)
assert "parameters" in mem and "gradients" in mem, "memory categories reported"
PY
done
# A mixture-of-experts model runs (runtime/model/moe.*): exec must not refuse it
# (a stale "does not build" gap did, on the 4xH100 run today22).
echo '{"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2}' > "$TMP/moe.json"
expect_exit 0 $P predict --model "$TMP/moe.json" --gpus 1xH100 --strategy mbs=2,precision=fp32 --seq 64 --global-batch 2 -o "$TMP/moe-plan.json"
expect_exit 0 $P exec "$TMP/moe-plan.json" --steps 2 --warmup 1 --device cpu -q -o "$TMP/moe-r.json"
# Bad plans: one line, exit 2, no result file.
echo '{"format": "planner-plan"' > "$TMP/bad.json"
expect_bad_input $P exec "$TMP/bad.json" -o "$TMP/r2.json"
sed 's/"dp": 1/"dp": 2/' "$ROOT/examples/plans/tiny-cpu.json" > "$TMP/dp2.json"
expect_bad_input $P exec "$TMP/dp2.json" -o "$TMP/r3.json"
expect_bad_input $P exec "$ROOT/examples/plans/tiny-cpu.json" --steps 0 -o "$TMP/r4.json"
expect_bad_input $P exec "$ROOT/examples/plans/tiny-cpu.json" --lr fast
expect_bad_input $P exec "$ROOT/examples/plans/tiny-cpu.json" --tokens /nonexistent.bin
# --kernels records GPU kernels: on the CPU it is refused before anything runs.
expect_bad_input $P exec "$ROOT/examples/plans/tiny-cpu.json" --device cpu --kernels -o "$TMP/r6.json"
expect_grep "kernels" "$TMP/err"
for f in r2 r3 r4 r6; do [ ! -e "$TMP/$f.json" ] || { echo "FAIL: $f.json written on bad input"; fails=$((fails+1)); }; done
finish
