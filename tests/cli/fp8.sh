#!/usr/bin/env bash
# precision=fp8 from the command line: predict on an H100 (the note names the
# FP8 peak and the MFU's bf16 peak), refusals on a GPU without FP8 and in the
# exports (exit 2, one line), the opt-in search (`--allow fp8`), and exec's
# refusal of fp8 with tp>1.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"

expect_exit 0 $P predict --model llama-3.2-1b --gpus 1xH100 --strategy mbs=4,gas=2,precision=fp8 --seq 2048 \
  -o "$TMP/fp8.json"
expect_grep "precision=fp8: the layers' qkv, o and MLP GEMMs in FP8" "$TMP/out"
expect_grep "MFU is counted against the bf16 peak" "$TMP/out"
expect_bad_input $P predict --model llama-3.2-1b --gpus 1xA100 --strategy precision=fp8 --seq 2048
expect_grep "A100" "$TMP/err"
expect_grep "FP8" "$TMP/err"
expect_bad_input $P export "$TMP/fp8.json" --to megatron -o "$TMP/args.txt"
expect_grep "precision=fp8" "$TMP/err"
[ -e "$TMP/args.txt" ] && { echo "FAIL: a refused export wrote a file"; fails=$((fails+1)); }
# The search: fp8 only when allowed, and only on GPUs that have it.
expect_exit 0 $P plan --model llama-3.2-1b --gpus 1xH100 --seq 2048 --global-batch 8 --top 40 --json
if grep -q "precision=fp8" "$TMP/out"; then echo "FAIL: fp8 searched without --allow fp8"; fails=$((fails+1)); fi
expect_exit 0 $P plan --model llama-3.2-1b --gpus 1xH100 --seq 2048 --global-batch 8 --top 40 --json --allow fp8
expect_grep "precision=fp8" "$TMP/out"
expect_exit 0 $P plan --model llama-3.2-1b --gpus 1xA100 --seq 2048 --global-batch 8 --top 40 --json --allow fp8
if grep -q "precision=fp8" "$TMP/out"; then echo "FAIL: fp8 searched on an A100"; fails=$((fails+1)); fi
expect_bad_input $P plan --model llama-3.2-1b --gpus 1xH100 --allow fp4
expect_grep "not one of: fp8" "$TMP/err"
# exec: the FP8 linears are not tensor-parallel in the runtime.
if [ "${PLANNER_HAS_RUNTIME:-0}" = 1 ]; then
  expect_exit 0 $P predict --model llama-3.2-1b --gpus 2xH100 --strategy tp=2,mbs=1,precision=fp8 --seq 2048 \
    -o "$TMP/fp8tp.json"
  expect_bad_input $P exec "$TMP/fp8tp.json" --steps 1 --warmup 0 --device cpu
  expect_grep "tp=2" "$TMP/err"
fi
finish
