#!/usr/bin/env bash
# Issue 11: every row of its table gives a right answer or exit 2 with one line
# naming the bad input; output files are safe; failed writes are failures.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
# expect_fast SECONDS CMD...: exit 0 within SECONDS of wall time (times PLANNER_TIME_FACTOR,
# which scripts/sanitize.sh sets for its slower instrumented build).
expect_fast() {
  local limit=$(( $1 * ${PLANNER_TIME_FACTOR:-1} )); shift
  local t0; t0=$(date +%s%N)
  expect_exit 0 "$@" || return 1
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$ms" -gt $((limit * 1000)) ]; then echo "FAIL: took $ms ms (limit $limit s): $*"; fails=$((fails+1)); fi
}

# Arithmetic that cannot lie.
expect_bad_input $P memory --model llama-2-70b --gpus 1xH100 --strategy mbs=32000 --seq 16777216 && expect_grep "mbs\*seq" "$TMP/err"
# A huge but legal need: a positive peak that does not fit (never negative, never FITS).
expect_exit 0 $P memory --model llama-2-70b --gpus 1xH100 --strategy mbs=256 --seq 16777216 --json
expect_grep '"fits": false' "$TMP/out"
if grep -q '"per_gpu_peak_bytes": -' "$TMP/out"; then echo "FAIL: negative peak"; fails=$((fails+1)); fi
expect_exit 0 $P max-model --gpus 1xRTX3090 --seq 16777216 --mbs 65536
expect_grep "No model of family" "$TMP/out"
for cmd in predict plan; do
  expect_bad_input $P $cmd --model gpt2 --gpus 65537xH100 && expect_grep "at most 8192 per node" "$TMP/err"
done
expect_bad_input $P memory --model gpt2 --gpus 4xH100 --strategy dp=1047553,pp=4100 && expect_grep "dp\*tp\*pp" "$TMP/err"
expect_bad_input $P memory --model gpt2 --gpus 4xH100 --strategy mbs=65537 && expect_grep "mbs" "$TMP/err"
expect_bad_input $P plan --model gpt2 --gpus 8xH100 --global-batch 8589934592 && expect_grep "global-batch" "$TMP/err"
# 2^31 sequences: a bounded search with an answer (2^20 micro-batches per step, their
# steady state extrapolated: costmodel/long_run.hpp).
expect_exit 0 $P plan --model gpt2 --gpus 8xH100 --global-batch 2147483648
expect_grep "gas=1048576" "$TMP/out"
echo '{"format": "planner-plan", "version": 4294967297}' > "$TMP/v.json"
expect_bad_input $P memory --plan "$TMP/v.json" && expect_grep "4294967297" "$TMP/err"

# Physical checks on profiles: rejected when loaded.
for bad in '"peak_bf16_flops": -1e15' '"kernel_overhead_seconds": -1' '"nvlink_efficiency": 2' \
           '"memory_bandwidth_Bps": 1e-300' '"collective_base_latency_seconds": -0.5'; do
  echo "{$bad}" > "$TMP/prof.json"
  expect_bad_input $P predict --model gpt2 --gpus 2xH100 --profile "$TMP/prof.json" && expect_grep "profile" "$TMP/err"
done

# Tiny cluster values (a unit mistake) are rejected when loaded, never turned into centuries or inf.
for v in 1e-300 1e-12; do
  sed "s/\"gbps\": 200/\"gbps\": $v/" "$ROOT/examples/clusters/4x8xA100.json" > "$TMP/cluster.json"
  expect_bad_input $P predict --model gpt2 --gpus "$TMP/cluster.json" && expect_grep "network bandwidth .* at least 1 MB/s" "$TMP/err"
done
echo '{"peak_fp32_flops": 1e-3}' > "$TMP/prof.json"
expect_bad_input $P predict --model gpt2 --gpus 2xH100 --profile "$TMP/prof.json" && expect_grep "peak_fp32_flops" "$TMP/err"

# MFU above 100% of the profile's peak (a small model at a long sequence): refused, naming the sequence.
cat > "$TMP/small.json" <<'JSON'
{"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
 "intermediate_size": 688, "vocab_size": 32000, "max_position_embeddings": 2048}
JSON
# With the default RTX 3090 profile (the in-step defaults since 2026-11-29) its
# MFU stays under 1 even at seq 1048576 (0.93); a profile whose attention runs
# at the GEMM rate gets there (147% at seq 16384, 335% at 1048576).
echo '{"format": "planner-profile", "gpu": "RTX3090", "attention_forward_relative": 1, "attention_backward_relative": 1,
 "attention_in_step_factor": 0.5, "memory_in_step_factor": 0.5, "gemm_efficiency": 1.0}' > "$TMP/fast.json"
expect_bad_input $P predict --model "$TMP/small.json" --gpus 1xRTX3090 --seq 1048576 --profile "$TMP/fast.json" && expect_grep "MFU .* above 100%.*seq=1048576" "$TMP/err"
# (seq 16384, default profile: answered; its non-causal attention FLOPs are
# counted against causal attention timed.)
expect_exit 0 $P predict --model "$TMP/small.json" --gpus 1xRTX3090 --seq 16384 --json
expect_grep '"mfu": 0\.' "$TMP/out"

# Bounded work: huge nodes refused by rule; long steps extrapolated, or refused by the simulator's limit.
expect_bad_input $P predict --model gpt2 --gpus 8193xH100 && expect_grep "8192 per node" "$TMP/err"
# Large nodes search best paths once per class of interchangeable GPUs (costmodel/topology.cpp):
# 1024, 4096 and the largest node, 8192 GPUs, predict and plan within 2 s (each well under 1 s here).
for n in 1024 4096 8192; do
  expect_fast 2 $P predict --model gpt2 --gpus 1x${n}xH100
  expect_fast 2 $P plan --model gpt2 --gpus 1x${n}xH100
done
# Across nodes too, and a deep pipeline on one large node.
expect_fast 2 $P plan --model llama-2-70b --gpus 2x4096xH100
cat > "$TMP/deep.json" <<'JSON'
{"model_type": "llama", "num_hidden_layers": 1024, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
 "intermediate_size": 688, "vocab_size": 32000, "max_position_embeddings": 2048}
JSON
expect_fast 2 $P predict --model "$TMP/deep.json" --gpus 1x4096xH100 --strategy dp=4,pp=1024
# NICs on few PCIe switches of a large node: every NIC-less GPU would spread over all of them, refused across nodes.
echo '{"gpu": "H100", "nodes": 2, "gpus_per_node": 4096, "network": {"nics_per_node": 64}}' > "$TMP/nics.json"
expect_bad_input $P plan --model gpt2 --gpus "$TMP/nics.json" && expect_grep "64 NICs on a node of 4096 GPUs" "$TMP/err"
expect_exit 0 $P predict --model gpt2 --gpus 12500x8xH100
expect_exit 0 $P plan --model gpt2 --gpus 12500x8xH100 --global-batch 100000
# 2^20 micro-batches: simulated a few at a time and extrapolated (costmodel/long_run.hpp), in well under 2 s.
for sched in 1f1b interleaved,vpp=2; do
  expect_fast 2 $P predict --model gpt2 --gpus 8xH100 --strategy dp=2,pp=4,schedule=$sched,gas=1048576 --json
  expect_grep '"step_seconds": [0-9]' "$TMP/out"
done
# What cannot be extrapolated is still refused by the simulator's limit: GPipe, and pipelines too deep.
expect_bad_input $P predict --model gpt2 --gpus 8xH100 --strategy dp=2,pp=4,schedule=gpipe,gas=1048576 \
  && expect_grep "simulator's limit.*GPipe" "$TMP/err"
expect_bad_input $P predict --model gpt2 --gpus 8xH100 --strategy dp=2,pp=4,gas=65536 --trace "$TMP/t.json" \
  && expect_grep "trace" "$TMP/err"
[ ! -e "$TMP/t.json" ] || { echo "FAIL: trace written"; fails=$((fails+1)); }

# Output files.
# -o -: stdout is exactly the plan (the report goes to stderr), and it loads back.
expect_exit 0 $P predict --model gpt2 --gpus 2xH100 -o -
cp "$TMP/out" "$TMP/stdout_plan.json"
expect_grep "Verdict" "$TMP/err"
expect_exit 0 $P memory --plan "$TMP/stdout_plan.json"
expect_exit 0 $P plan --model gpt2 --gpus 2xH100 --global-batch 8 -o -
cp "$TMP/out" "$TMP/stdout_plan.json"
expect_exit 0 $P predict --plan "$TMP/stdout_plan.json"
[ ! -e ./- ] || { echo "FAIL: wrote a file named -"; fails=$((fails+1)); }
expect_exit 0 $P predict --model gpt2 --gpus 2xH100 -o /dev/null
[ -c /dev/null ] || { echo "FAIL: /dev/null replaced"; fails=$((fails+1)); }
mkfifo "$TMP/fifo"
( cat "$TMP/fifo" > "$TMP/from_fifo" ) &
expect_exit 0 $P predict --model gpt2 --gpus 2xH100 -o "$TMP/fifo"
wait
[ -p "$TMP/fifo" ] || { echo "FAIL: FIFO replaced by a file"; fails=$((fails+1)); }
expect_grep '"format": "planner-plan"' "$TMP/from_fifo"
# A symlink planted where an old, predictable temporary name would be is never followed.
echo keep > "$TMP/victim"
for pid in $(seq $$ $(( $$ + 50 ))); do ln -sf "$TMP/victim" "$TMP/.plan.json.tmp$pid"; done
expect_exit 0 $P predict --model gpt2 --gpus 2xH100 -o "$TMP/plan.json"
expect_grep '^keep$' "$TMP/victim"
expect_grep '"format": "planner-plan"' "$TMP/plan.json"
# (the planted links are .plan.json.tmpPID: leave them out of the check)
ls -a "$TMP" | grep -v '^\.plan\.json\.tmp[0-9]*$' | grep -q '^\.plan\.json\.' && { echo "FAIL: temporary left behind"; fails=$((fails+1)); }
mkdir "$TMP/dir"
expect_bad_input $P predict --model gpt2 --gpus 2xH100 -o "$TMP/dir"

# Failed writes on stdout: exit 1 and one line.
if [ -w /dev/full ]; then
  $P list models > /dev/full 2>"$TMP/err"; rc=$?
  if [ "$rc" = 1 ] && [ "$(wc -l <"$TMP/err")" = 1 ]; then passes=$((passes+1)); else
    echo "FAIL: planner list > /dev/full gave exit $rc"; cat "$TMP/err"; fails=$((fails+1)); fi
fi
finish
