#!/usr/bin/env bash
# planner export --to megatron|fsdp|deepspeed: files, launch lines, the Megatron-LM
# flags against core_v0.19.0's parser list, refusals (exit 2, one line, nothing written).
# DeepSpeed's own parser checks the DeepSpeed configs in export_deepspeed.sh.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
FLAGS="$ROOT/tests/data/megatron_core_v0.19.0_arguments.txt"

# TP + SP + PP (interleaved) + selective recompute + distributed optimizer: Megatron only.
expect_exit 0 $P predict --model llama-2-13b --gpus 4x8xH100 --strategy tp=8,pp=4,schedule=interleaved,vpp=2,sp=1,zero=1,ckpt=selective,mbs=1 \
  --global-batch 64 -o "$TMP/mg.json"
# Sequence parallelism needs Transformer Engine or apex beside megatron-core
# (its local layers assert, run1 of validation/engines/h100x4): refused
# without --with-te, exported with it.
expect_bad_input $P export "$TMP/mg.json" --to megatron -o "$TMP/args.txt" && expect_grep "Transformer Engine or apex" "$TMP/err"
[ ! -e "$TMP/args.txt" ] || { echo "FAIL: a refused export wrote $TMP/args.txt"; fails=$((fails+1)); }
expect_exit 0 $P export "$TMP/mg.json" --to megatron --with-te -o "$TMP/args.txt"
expect_grep "^launch: CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes 4 --nproc-per-node 8 .* scripts/engines/megatron_train.py \\$\\(cat $TMP/args.txt\\)" "$TMP/out"
python3 - "$TMP/args.txt" "$FLAGS" <<'PY' || fails=$((fails+1))
import sys
args = [line.split() for line in open(sys.argv[1]) if line.strip()]
known = {}
for line in open(sys.argv[2]):
    if line.startswith("#") or not line.strip(): continue
    parts = line.split()
    known[parts[0]] = set(parts[1].split(",")) if len(parts) > 1 else set()
a = {}
for words in args:
    flag = words[0]
    assert flag in known, f"{flag} is not a Megatron-LM core_v0.19.0 flag"
    if known[flag] and len(words) > 1: assert words[1] in known[flag], (flag, words[1], known[flag])
    a[flag] = words[1] if len(words) > 1 else True
# Parsed back as Megatron derives the rest: dp = 32 / (8 x 4) = 1, accumulation = 64 / (1 x 1).
assert a["--tensor-model-parallel-size"] == "8" and a["--pipeline-model-parallel-size"] == "4"
assert a["--num-virtual-stages-per-pipeline-rank"] == "2" and a["--sequence-parallel"] is True
assert a["--recompute-granularity"] == "selective" and a["--use-distributed-optimizer"] is True
assert a["--micro-batch-size"] == "1" and a["--global-batch-size"] == "64" and a["--bf16"] is True
assert a["--num-layers"] == "40" and a["--hidden-size"] == "5120" and a["--swiglu"] is True
assert a["--normalization"] == "RMSNorm" and a["--position-embedding-type"] == "rope"
PY
for engine in deepspeed fsdp; do
  expect_bad_input $P export "$TMP/mg.json" --to $engine -o "$TMP/no-$engine.json"
  [ ! -e "$TMP/no-$engine.json" ] || { echo "FAIL: $engine file written for a refused plan"; fails=$((fails+1)); }
done
expect_bad_input $P export "$TMP/mg.json" --to fsdp && expect_grep "no pipeline parallelism" "$TMP/err"

# ZeRO-3 with TP as FSDP2 settings; without -o the file goes to stdout.
expect_exit 0 $P predict --model gpt2-large --gpus 8xA100-80GB --strategy tp=2,sp=1,zero=3,ckpt=full,mbs=2 --global-batch 16 -o "$TMP/fs.json"
expect_exit 0 $P export "$TMP/fs.json" --to fsdp --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
c = j["config"]
assert j["engine"] == "fsdp" and j["launch"].startswith("torchrun --nproc-per-node 8 scripts/engines/fsdp_train.py --fsdp-config") and j["config"]["model"]["hidden"] > 0
assert c["device_mesh"] == {"shape": [4, 2], "dim_names": ["dp", "tp"]}
assert c["fully_shard"]["reshard_after_forward"] is True
assert c["fully_shard"]["mp_policy"] == {"param_dtype": "bfloat16", "reduce_dtype": "float32"}
assert c["tensor_parallel"]["sequence_parallel"] is True and c["activation_checkpointing"] == "full"
# The layouts between the styles: row-wise layers hand the residual back sequence-sharded.
tp = c["tensor_parallel"]["parallelize_module_plan"]
assert tp["attention.out"] == tp["mlp.down"] == "RowwiseParallel(output_layouts=Shard(1))", tp
assert tp["norms"] == "SequenceParallel()" and "input_layouts=Shard(1)" in tp["lm_head"], tp
assert c["micro_batch_size"] * c["gradient_accumulation_steps"] * 4 == c["global_batch_size"] == 16
PY
expect_bad_input $P export "$TMP/fs.json" --to deepspeed && expect_grep "sequence parallelism" "$TMP/err"
expect_exit 0 $P predict --model gpt2-large --gpus 8xA100-80GB --strategy tp=2,zero=3,ckpt=full,mbs=2 --global-batch 16 -o "$TMP/ds3.json"
# AutoTP trains with ZeRO 0-2 only: refused, with the search that finds one DeepSpeed runs.
expect_bad_input $P export "$TMP/ds3.json" --to deepspeed && expect_grep "stages 0-2.*--engine deepspeed" "$TMP/err"
# plan --engine megatron keeps no tp>1 sequence-parallel plan without --with-te; with it, it does.
for te in "" --with-te; do
  expect_exit 0 $P plan --model llama-2-13b --gpus 8xH100 --seq 4096 --global-batch 64 --engine megatron $te --json --top 20
  python3 -c 'import json,sys; s=[p["strategy"] for p in json.load(open(sys.argv[1]))["plans"]]; n=sum("sp=1" in x and "tp=1," not in x for x in s); assert (n > 0) == (sys.argv[2] == "--with-te"), (sys.argv[2], n)' "$TMP/out" "$te" || fails=$((fails+1))
done
# predict --engine X --json carries the engine's step (issue 33): ZeRO-3's host work and its fetch syncs make DeepSpeed's step longer than ours.
expect_exit 0 $P predict --model llama-3.2-1b --gpus 4xH100 --strategy zero=3,mbs=2,gas=2 --seq 2048 --global-batch 16 --engine deepspeed --json
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); e=j["engine_step"]; names=[t["name"] for t in e["terms"]]; assert e["engine"]=="deepspeed" and "host work and its syncs" in names and e["host_seconds"] > 0 and e["step_seconds"] > j["step_seconds"] and e["notes"], e' "$TMP/out" || fails=$((fails+1))
# The engine's known memory gap is said by predict and plan as by memory (costmodel/engines.hpp engine_memory_note).
expect_exit 0 $P predict --model llama-3.2-1b --gpus 4xH100 --strategy zero=3,mbs=2,gas=2 --seq 2048 --global-batch 16 --engine deepspeed
expect_grep "DeepSpeed: its ZeRO buffers are counted at the moments" "$TMP/out"
expect_exit 0 $P plan --model llama-3.2-1b --gpus 4xH100 --seq 2048 --global-batch 16 --engine megatron --top 2
expect_grep "Megatron without Transformer Engine" "$TMP/out"
expect_exit 0 $P plan --model llama-3.2-1b --gpus 4xH100 --seq 2048 --global-batch 16 --engine megatron --with-te --top 2
if grep -q "Megatron without Transformer Engine" "$TMP/out"; then echo "FAIL: the no-TE note with --with-te"; fails=$((fails+1)); fi
expect_exit 0 $P predict --model gpt2-large --gpus 8xA100-80GB --strategy tp=2,zero=2,ckpt=full,mbs=2 --global-batch 16 -o "$TMP/ds.json"
expect_exit 0 $P export "$TMP/ds.json" --to deepspeed
expect_grep "^# DeepSpeed 0.19.8 configuration" "$TMP/out"
expect_grep '"autotp_size": 2' "$TMP/out" && expect_grep "^launch: deepspeed --num_gpus 8 scripts/engines/deepspeed_train.py --plan " "$TMP/out"
expect_exit 0 $P export "$TMP/fs.json" --to megatron --with-te --json
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); a=j["args"]; i=a.index("--data-parallel-sharding-strategy"); assert a[i+1]=="optim_grads_params" and "--use-megatron-fsdp" in a and not j["launch"].startswith("CUDA_DEVICE")' "$TMP/out" || fails=$((fails+1))

# Bad input: one line on stderr, exit 2, nothing written.
expect_bad_input $P export "$TMP/fs.json" --to horovod -o "$TMP/x1" && expect_grep "deepspeed, megatron or fsdp" "$TMP/err"
expect_bad_input $P export "$TMP/fs.json" --to ours -o "$TMP/x2"
expect_bad_input $P export /nonexistent/plan.json --to deepspeed -o "$TMP/x3"
expect_bad_input $P export "$TMP/fs.json" --to deepspeed -o /nonexistent-dir/ds.json
expect_bad_input $P export "$TMP/fs.json"
expect_exit 0 $P predict --model opt-1.3b --gpus 8xA100-80GB --strategy zero=1,mbs=4 --global-batch 32 -o "$TMP/opt.json"
expect_bad_input $P export "$TMP/opt.json" --to megatron -o "$TMP/x4" && expect_grep "ReLU" "$TMP/err"
for f in x1 x2 x3 x4; do [ ! -e "$TMP/$f" ] || { echo "FAIL: $f written on bad input"; fails=$((fails+1)); }; done
expect_exit 0 $P export --help
expect_grep "Examples:" "$TMP/out"
finish
