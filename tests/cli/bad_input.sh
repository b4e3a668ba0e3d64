#!/usr/bin/env bash
# Every bad-input class: one line on stderr, exit code 2, nothing on stdout, no file written.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
expect_bad_input $P memory --model gtp2 --gpus 2xRTX3090 --strategy dp=2 && expect_grep "did you mean 'gpt2'" "$TMP/err"
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3080 --strategy dp=2 && expect_grep "did you mean" "$TMP/err"
expect_bad_input $P memory --model gpt2 --gpus 2x --strategy dp=2
expect_bad_input $P memory --model gpt2 --gpus 0xH100 --strategy dp=2
expect_bad_input $P memory --model gpt2 --gpus -2xH100
expect_bad_input $P memory --model gpt2 --gpus 99999999999999999999xH100
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3090 --strategy dp=2,tp=
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3090 --strategy dq=2
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3090 --strategy dp=3 && expect_grep "must equal the GPU count" "$TMP/err"
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3090 --strategy tp=2,dp=1,offload=all && expect_grep "zero=3" "$TMP/err"
expect_bad_input $P memory --model gpt2 --gpus 2xV100-32GB --strategy dp=2,precision=bf16 && expect_grep "bfloat16" "$TMP/err"
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3090 --strategy dp=2 --seq 0
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3090 --strategy dp=2 --seq -5
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3090 --strategy dp=2 --seq 99999999999999999999999
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3090 --strategy dp=2 --global-batch 3
expect_bad_input $P memory --model gpt2 --gpus 2xRTX3090 --strategy dp=2 --host-memory lots
expect_bad_input $P memory --model /nonexistent/config.json --gpus 2xRTX3090
expect_bad_input $P memory --plan /nonexistent/plan.json
echo '{"format": "planner-plan", "version": 1, "model": ' > "$TMP/broken.json"
expect_bad_input $P memory --plan "$TMP/broken.json" && expect_grep "not valid JSON" "$TMP/err"
echo '{"format": "planner-plan", "version": 99}' > "$TMP/future.json"
expect_bad_input $P memory --plan "$TMP/future.json" && expect_grep "version 99" "$TMP/err"
echo '{"model_type": "gpt2", "n_layer": 0, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}' > "$TMP/zero.json"
expect_bad_input $P memory --model "$TMP/zero.json" --gpus 1xRTX3090
expect_bad_input $P max-model --gpus 2xRTX3090 --offload sometimes
expect_bad_input $P max-model --gpus 2xRTX3090 --family gpt5
expect_bad_input $P max-model --gpus 2xRTX3090 --mbs 0
expect_bad_input $P memory --gpus 2xRTX3090
expect_bad_input $P bench --seq 99999999
expect_bad_input $P frobnicate
# Nothing half-written: a failing run leaves no output file.
expect_bad_input $P predict --model gpt2 --gpus 2xRTX3090 --strategy dp=3 --trace "$TMP/trace.json"
[ ! -e "$TMP/trace.json" ] || { echo "FAIL: trace written on bad input"; fails=$((fails+1)); }
finish
