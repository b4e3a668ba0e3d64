#!/usr/bin/env bash
# Issue 28, "Honest answers for the questions people type": one check per finding.
. "$(dirname "$0")/../cli_lib.sh"
P=$(realpath "$PLANNER"); ROOT=$(realpath "$ROOT")
cd "$ROOT" || exit 1
json() { python3 -c "import json,sys; j=json.load(open('$TMP/out')); $1" || { echo "FAIL: $1"; fails=$((fails+1)); }; }

# 1. 64xH100 means eight DGX nodes: the same answer as 8x8xH100, with a note; 1x64xH100 stays one node.
expect_exit 0 $P predict --model llama-2-7b --gpus 8x8xH100 --strategy tp=2 --global-batch 512 --json
a=$(python3 -c "import json;print(json.load(open('$TMP/out'))['step_seconds'])")
expect_exit 0 $P predict --model llama-2-7b --gpus 64xH100 --strategy tp=2 --global-batch 512 --json
json "assert j['step_seconds'] == $a and j['plan']['cluster']['nodes'] == 8, j['step_seconds']"
expect_exit 0 $P predict --model llama-2-7b --gpus 64xH100 --strategy tp=2 --global-batch 512
expect_grep "^Cluster 8 nodes x 8 H100-SXM \(nvswitch 450 GB/s per GPU\); 1 NIC per GPU infiniband 400 Gb/s; host RAM" "$TMP/out"
expect_grep "'64xH100' read as 8 nodes of 8 GPUs" "$TMP/out"
expect_exit 0 $P memory --model llama-2-7b --gpus 1x64xH100 --strategy tp=2 --global-batch 512 --json
json "assert j['plan']['cluster']['nodes'] == 1 and j['plan']['cluster']['gpus_per_node'] == 64"
expect_exit 0 $P memory --model llama-2-7b --gpus 12xH100 --strategy tp=2 --global-batch 12
expect_grep "'12xH100': 12 GPUs are not a multiple of the usual H100-SXM node of 8" "$TMP/out"

# 2. Defaults a user would choose, listed: seq at most 4096, the batch of a pretraining question ~2M tokens.
expect_exit 0 $P predict --model examples/models/llama-3.2-1b.json --gpus 8xH100 --json
json "assert j['plan']['seq'] == 4096 and any(a.startswith('seq 4096 (the model allows 131072') for a in j['assumed']), j['assumed']"
json "assert any('host RAM' in a for a in j['assumed']) and any(a.startswith('global batch 8') for a in j['assumed'])"
expect_exit 0 $P memory --model gpt2-xl --gpus 2xRTX3090 --strategy zero=1 --seq 1024 --global-batch 32
expect_grep "^assumed: full training: AdamW on every weight .*; host RAM 64.00 GiB per node .*; an NVLink bridge between pairs of RTX3090" "$TMP/out"
expect_exit 0 $P max-model --gpus 2xRTX3090
expect_grep "^assumed: full training: AdamW on every weight \(finetune=lora\|qlora: adapters on a frozen base\)" "$TMP/out"
expect_exit 0 $P predict --model llama-2-7b --gpus 8xA100 --strategy zero=1 --seq 2048 --global-batch 64
expect_grep "^assumed: .*A100 = A100-80GB-SXM" "$TMP/out"
expect_exit 0 $P plan --model llama-2-7b --gpus 8xH100 --tokens 1T --top 1 --json -q
json "assert j['plans'][0]['global_batch'] == 512 and j['plans'][0]['seq'] == 4096, j['plans'][0]['global_batch']"

# 3. Uncalibrated GPUs get a band; compare names the calibrated ones and says where bands overlap.
expect_exit 0 $P predict --model gpt2-xl --gpus 1xRTX3090 --strategy mbs=4,ckpt=full --global-batch 4 --json
json "lo, hi = j['step_seconds_band']; assert lo < j['step_seconds'] < hi, (lo, hi)"
expect_exit 0 $P predict --model gpt2-xl --gpus 1xH100 --strategy mbs=4,ckpt=full --global-batch 4
expect_grep "^note: H100-SXM is calibrated: held-out step times were [0-9.]+% off on average" "$TMP/out"
expect_exit 0 $P compare --model llama-2-7b --gpus 8xA100-80GB,8xH100 --tokens 1T --prices examples/prices/v100-a100-h100.json
expect_grep "^note: A100-80GB-SXM is not calibrated: step time and throughput are given as a band" "$TMP/out"
expect_grep "^note: H100-SXM is calibrated" "$TMP/out"
expect_grep "^ 1  8xH100 .* [0-9]+ - [0-9]+ \(calibrated\)$" "$TMP/out"
expect_grep "^ 2  8xA100-80GB .* [0-9]+ - [0-9]+ \(not calibrated\)$" "$TMP/out"
expect_exit 0 $P compare --model llama-2-7b --gpus 8xA100-80GB,16xV100-32GB --tokens 1T
expect_grep "^note: 8xA100-80GB and 16xV100-32GB overlap within their bands \(time [0-9]+ d - [0-9]+ d vs" "$TMP/out"

# 4. A way out. memory: the three cheapest changes that fit, with their step time.
expect_exit 0 $P memory --model llama-2-7b --gpus 8xH100 --strategy mbs=8 --seq 4096 --global-batch 64
expect_grep "^Verdict: DOES NOT FIT" "$TMP/out"
expect_grep "^Cheapest changes that fit" "$TMP/out"
[ "$(grep -cE '^  [123]\. .* step [0-9.]+ s \([+-][0-9.]+%\), peak' "$TMP/out")" = 3 ] || { echo "FAIL: three fixes expected"; cat "$TMP/out"; fails=$((fails+1)); }
# plan: nothing fits names the smallest cluster that does.
expect_exit 0 $P plan --model llama-2-70b --gpus 1xH100 --seq 4096 -q
expect_grep "^way out: the smallest cluster that fits is [0-9x]+H100-SXM \([0-9]+ GPUs\)" "$TMP/out"
# plan: distinct plans only; --explain agrees with the table.
expect_exit 0 $P plan --model gpt2-xl --gpus 1xRTX3090 --seq 1024 --global-batch 8 --top 10 --json -q
json "k=[round(p['step_seconds'],9) for p in j['plans']]; assert len(k) == len(set(k)), k"
json "assert not any('zero=2' in p['strategy'] for p in j['plans']), [p['strategy'] for p in j['plans']]"
expect_exit 0 $P plan --model gpt2-xl --gpus 1xRTX3090 --seq 1024 --global-batch 8 --explain -q
expect_grep "^  1  dp=1,tp=1,pp=1,zero=1,offload=optimizer" "$TMP/out"
if grep -q "ZeRO-3:.*no strategy of this family" "$TMP/out"; then
  echo "FAIL: --explain says no ZeRO-3 strategy while the table has zero=3"; fails=$((fails+1)); fi

# 6. An export refused for an engine names the plan --engine command that finds one.
expect_exit 0 $P predict --model llama-2-7b --gpus 8xH100 --strategy tp=4,sp=1 --seq 4096 --global-batch 64 -o "$TMP/sp.json"
expect_bad_input $P export "$TMP/sp.json" --to deepspeed
expect_grep "planner plan --model llama-2-7b --gpus 8xH100 --seq 4096 --global-batch 64 --engine deepspeed" "$TMP/err"
# Also: an export of a plan predicted not to fit says so.
expect_exit 0 $P memory --model llama-2-7b --gpus 8xH100 --strategy mbs=8 --seq 4096 --global-batch 64 -o "$TMP/big.json"
expect_exit 0 $P export "$TMP/big.json" --to fsdp
expect_grep "^note: this plan is predicted NOT to fit" "$TMP/out"

# 8. A profile from another GPU is refused unless --profile-any, and then every answer says so.
H100P=validation/h100/calib19/profile-h100.json
expect_bad_input $P plan --model llama-2-7b --gpus 2xRTX3090 --global-batch 16 --profile $H100P -q
expect_grep "measured on H100-SXM, not on RTX3090.*--profile-any" "$TMP/err"
expect_bad_input $P predict --model gpt2 --gpus 1xRTX3090 --profile $H100P
expect_bad_input $P memory --model gpt2 --gpus 1xRTX3090 --profile $H100P
expect_exit 0 $P predict --model gpt2 --gpus 1xRTX3090 --profile $H100P --profile-any
expect_grep "profile measured on H100-SXM applied to RTX3090 \(--profile-any\)" "$TMP/out"
expect_exit 0 $P predict --model gpt2 --gpus 1xH100 --profile $H100P

# 9. Every rule the runtime enforces is check_compat's: sp needs seq divisible by tp, rotary an even head dim.
expect_exit 0 $P plan --model llama-2-70b --gpus 8xH100 --seq 4095 --global-batch 64 --top 5 --json -q
json "assert not any('sp=1' in p['strategy'] and 'tp=1,' not in p['strategy'] for p in j['plans']), [p['strategy'] for p in j['plans']]"
expect_bad_input $P predict --model llama-2-70b --gpus 8xH100 --strategy tp=4,sp=1 --seq 4095 --global-batch 64
expect_grep "sp=1 splits the sequence over the tp ranks: seq=4095 is not a multiple of tp=4" "$TMP/err"
cat > "$TMP/odd.json" <<'JSON'
{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 300, "num_attention_heads": 4, "num_key_value_heads": 4,
 "intermediate_size": 688, "vocab_size": 32000, "max_position_embeddings": 2048}
JSON
expect_bad_input $P memory --model "$TMP/odd.json" --gpus 1xH100
expect_grep "rotary positions need an even head dimension" "$TMP/err"

# 10. compare's default batch works for 1,000 H100s beside 1,024 A100s, and the help says what it is.
expect_exit 0 $P compare --model llama-2-7b --gpus 125x8xH100,128x8xA100-80GB
if grep -q "no strategy fits" "$TMP/out"; then echo "FAIL: compare found nothing for a cluster"; cat "$TMP/out"; fails=$((fails+1)); fi
expect_grep "^assumed: .*global batch .*a multiple of each cluster's own GPU count" "$TMP/out"
expect_exit 0 $P compare --help
expect_grep "about 2M tokens per step" "$TMP/out"

# 11. A plan's strategy text and fields must agree; the examples do.
python3 - "$TMP/bad.json" <<'PY'
import json, sys
j = json.load(open("examples/plans/tiny-cpu.json"))
j["strategy"]["text"] = "dp=2,zero=3,mbs=4,gas=1"
json.dump(j, open(sys.argv[1], "w"))
PY
expect_bad_input $P predict --plan "$TMP/bad.json"
expect_grep "strategy text 'dp=2,zero=3,mbs=4,gas=1' says .*its fields say" "$TMP/err"
for f in examples/plans/tiny-cpu-pp2.json examples/plans/tiny-cpu-tp2-sp.json; do expect_exit 0 $P memory --plan $f; done

# 12. A cluster file's CPU figures count for calibrated GPUs too (the CPU optimizer of offload).
for g in 0.001 1000000; do
  echo "{\"gpu\": \"H100\", \"gpus_per_node\": 8, \"cpu_GFLOPS\": $g}" > "$TMP/c$g.json"
  expect_exit 0 $P predict --model llama-2-7b --gpus "$TMP/c$g.json" --strategy zero=2,offload=optimizer --seq 1024 --global-batch 8 --json
  python3 -c "import json;print(json.load(open('$TMP/out'))['step_seconds'])" > "$TMP/t$g"
done
python3 -c "import sys; a=float(open('$TMP/t0.001').read()); b=float(open('$TMP/t1000000').read()); assert a > 10*b, (a, b)" || { echo "FAIL: cpu_GFLOPS ignored"; fails=$((fails+1)); }

finish
