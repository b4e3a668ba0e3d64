#!/usr/bin/env bash
# Context parallelism from the command line: predict and memory with cp=,
# the exchange actions in --json's step program, the search trying cp from
# seq 8192, export to Megatron-LM (--context-parallel-size) and the refusals
# (exit 2, one line).
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"

expect_exit 0 $P predict --model llama-2-7b --gpus 8xH100 --strategy tp=2,cp=4,zero=1,ckpt=full --seq 32768 \
  --global-batch 8 -o "$TMP/cp.json"
expect_grep "cp=4" "$TMP/out"
expect_grep "cp=4: attention passes K/V around a ring of 4 ranks" "$TMP/out"
expect_exit 0 $P export "$TMP/cp.json" --to megatron -o "$TMP/args.txt"
expect_grep "^--context-parallel-size 4$" "$TMP/args.txt"
expect_bad_input $P export "$TMP/cp.json" --to deepspeed -o "$TMP/ds.json"
expect_grep "context parallelism" "$TMP/err"
[ -e "$TMP/ds.json" ] && { echo "FAIL: a refused export wrote a file"; fails=$((fails+1)); }
expect_bad_input $P memory --model llama-2-7b --gpus 8xH100 --strategy tp=2,cp=4 --seq 32772
expect_grep "not a multiple of 8" "$TMP/err"
expect_bad_input $P predict --model bert-large --gpus 4xH100 --strategy cp=2 --seq 512
# The search: cp plans appear at seq 32768 and not at 4096.
expect_exit 0 $P plan --model llama-2-7b --gpus 8xH100 --seq 32768 --global-batch 8 --top 40 --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
texts = json.dumps(j)
assert '"cp": ' in texts or "cp=" in texts, "no cp plan among the top 40 at seq 32768"
PY
expect_exit 0 $P plan --model llama-2-7b --gpus 8xH100 --seq 4096 --global-batch 8 --top 40 --json
if grep -q "cp=" "$TMP/out"; then echo "FAIL: cp searched at seq 4096"; fails=$((fails+1)); fi
finish
