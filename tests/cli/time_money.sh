#!/usr/bin/env bash
# --tokens/--price/--prices, plan --objective and several --gpus clusters, plan --rank -o,
# predict -o and memory -o, --engine on memory/predict/plan; bad input writes nothing.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
echo '{"A100-80GB": 1.0, "H100": 10.0, "V100-32GB": 0.5}' > "$TMP/prices.json"

# predict: days, GPU-hours and cost from the predicted throughput.
expect_exit 0 $P predict --model llama-2-7b --gpus 8xH100 --strategy tp=2,mbs=2 --global-batch 64 --tokens 1T --price 2.5 --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
t, tps = j["train"], j["tokens_per_second"]
assert t["tokens"] == 1e12
assert abs(t["days"] - 1e12 / tps / 86400) < 1e-9 * t["days"]
assert abs(t["gpu_hours"] - t["days"] * 24 * 8) < 1e-9 * t["gpu_hours"]
assert abs(t["cost"] - t["gpu_hours"] * 2.5) < 1e-9 * t["cost"] and t["price_per_gpu_hour"] == 2.5
PY
expect_exit 0 $P predict --model llama-2-7b --gpus 8xH100 --strategy tp=2,mbs=2 --global-batch 64 --tokens 300B --prices "$TMP/prices.json"
expect_grep "^To train 300B tokens: [0-9.]+ days, [0-9]+ GPU-hours, cost [0-9]+ \(10.00 per GPU-hour\)" "$TMP/out"

# plan over three clusters by cost: cheapest first, and the winner is not the fastest cluster
# (H100 is 2.8x faster than A100 here, but costs 10x per GPU-hour).
expect_exit 0 $P plan --model llama-2-7b --gpus 8xA100-80GB,8xH100,32xV100-32GB --global-batch 512 --tokens 1T \
  --prices "$TMP/prices.json" --objective cost --top 5 --json -q
cp "$TMP/out" "$TMP/by_cost.json"
expect_exit 0 $P plan --model llama-2-7b --gpus 8xA100-80GB,8xH100,32xV100-32GB --global-batch 512 --tokens 1T \
  --prices "$TMP/prices.json" --top 5 --json -q
python3 - "$TMP/by_cost.json" "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
cost, tput = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert cost["objective"] == "cost" and tput["objective"] == "throughput" and len(cost["clusters"]) == 3
costs = [p["train"]["cost"] for p in cost["plans"]]
assert costs == sorted(costs), costs
tps = [p["tokens_per_second"] for p in tput["plans"]]
assert tps == sorted(tps, reverse=True), tps
assert cost["plans"][0]["cluster"] == "8xA100-80GB" and tput["plans"][0]["cluster"] == "8xH100"
for p in cost["plans"] + tput["plans"]:
    price = {"8xA100-80GB": 1.0, "8xH100": 10.0, "32xV100-32GB": 0.5}[p["cluster"]]
    assert abs(p["train"]["cost"] - p["train"]["gpu_hours"] * price) < 1e-6 * p["train"]["cost"]
PY
expect_exit 0 $P plan --model llama-2-7b --gpus 8xA100-80GB,8xH100 --global-batch 512 --top 4 -q
expect_grep "^Best first by throughput:" "$TMP/out"
# One cluster: time and cost rank as throughput; the table says so.
expect_exit 0 $P plan --model gpt2-xl --gpus 2xRTX3090 --global-batch 32 --tokens 10B --price 0.4 --objective cost -q
expect_grep "^To train 10B tokens:" "$TMP/out" && expect_grep "ranks as throughput" "$TMP/out"

# plan --rank K -o writes the K-th plan of the list.
expect_exit 0 $P plan --model gpt2-xl --gpus 2xRTX3090 --global-batch 32 --top 3 --json -q
third=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["plans"][2]["strategy"])' "$TMP/out")
expect_exit 0 $P plan --model gpt2-xl --gpus 2xRTX3090 --global-batch 32 --rank 3 -o "$TMP/third.json" -q
expect_grep "Wrote the #3 plan" "$TMP/out"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["strategy"]["text"] == sys.argv[2]' "$TMP/third.json" "$third" || fails=$((fails+1))
expect_exit 1 $P plan --model gpt2-xl --gpus 2xRTX3090 --global-batch 32 --rank 999 -o "$TMP/none.json" -q
[ ! -e "$TMP/none.json" ] || { echo "FAIL: plan written for a rank that does not exist"; fails=$((fails+1)); }

# predict -o and memory -o write the plan they were given; --plan reads it back alike.
expect_exit 0 $P predict --model gpt2-xl --gpus 2xRTX3090 --strategy zero=2,ckpt=full,mbs=2 --global-batch 32 -o "$TMP/p.json" --json
step=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["step_seconds"])' "$TMP/out")
expect_exit 0 $P predict --plan "$TMP/p.json" --json
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["step_seconds"] == float(sys.argv[2])' "$TMP/out" "$step" || fails=$((fails+1))
expect_exit 0 $P memory --model gpt2-xl --gpus 2xRTX3090 --strategy zero=1,mbs=1 --global-batch 8 -o "$TMP/m.json"
expect_grep "Wrote the plan to" "$TMP/out"
expect_exit 0 $P memory --plan "$TMP/m.json" --json
expect_grep '"text": "dp=2,tp=1,pp=1,zero=1,offload=none,ckpt=none,mbs=1,gas=4' "$TMP/out"

# --engine: what that engine allocates, moment by moment (engine_moments): with
# full recomputation ZeRO-2's optimizer step binds, when DeepSpeed's two
# 5e8-element 16-bit buckets are freed (NCCL's 990 MiB for the dp communicator
# remain); plan keeps what it can run.
expect_exit 0 $P memory --plan "$TMP/p.json" --engine deepspeed --json
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); m=j["stages"][0]["moments"]; assert j["engine"]=="deepspeed" and j["peak_moment"]=="optimizer step"==max(m, key=m.get) and j["per_gpu_peak_bytes"]==m["optimizer step"] and j["breakdown"]["comm_buffers"]==990*2**20' "$TMP/out" || fails=$((fails+1))
expect_exit 0 $P predict --plan "$TMP/p.json" --engine fsdp
expect_grep "^Memory as PyTorch 2.13" "$TMP/out"
# (llama-2-13b on 8 A100-40GB: pipelines are among this planner's best, FSDP has none.)
expect_exit 0 $P plan --model llama-2-13b --gpus 8xA100-40GB-SXM --global-batch 64 --engine fsdp --top 10 --json -q
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
assert j["plans"] and j["candidates_engine_cannot_run"] > 0
for p in j["plans"]:
    assert ",pp=1," in p["strategy"] and "offload=optimizer" not in p["strategy"], p["strategy"]
    assert p["memory"]["engine"] == "fsdp"
PY

# Bad input: one line, exit 2, nothing written.
expect_bad_input $P memory --plan "$TMP/p.json" --engine horovod
expect_bad_input $P memory --model opt-1.3b --gpus 2xRTX3090 --strategy zero=1 --engine megatron -o "$TMP/b1.json" && expect_grep "ReLU" "$TMP/err"
expect_bad_input $P predict --plan "$TMP/p.json" --tokens 0 -o "$TMP/b2.json"
expect_bad_input $P predict --plan "$TMP/p.json" --tokens 1T --price -1 -o "$TMP/b3.json"
expect_bad_input $P predict --plan "$TMP/p.json" --price 2 -o "$TMP/b4.json" && expect_grep "need --tokens" "$TMP/err"
expect_bad_input $P predict --plan "$TMP/p.json" --tokens 1T --price 2 --prices "$TMP/prices.json"
expect_bad_input $P predict --plan "$TMP/p.json" --tokens 1T --prices "$TMP/prices.json" -o "$TMP/b5.json" && expect_grep "no price for RTX3090" "$TMP/err"
expect_bad_input $P predict --plan "$TMP/p.json" --trace "$TMP/b6.trace" -o /nonexistent-dir/p.json
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090 --objective cost --tokens 1T -o "$TMP/b7.json" && expect_grep "needs --tokens and --price" "$TMP/err"
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090 --objective time && expect_grep "needs --tokens" "$TMP/err"
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090 --objective speed
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090,8xH100 && expect_grep "global-batch" "$TMP/err"
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090,8xH100 --global-batch 32 --explain
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090,8xH1000 --global-batch 32 && expect_grep "did you mean" "$TMP/err"
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090 --rank 2 && expect_grep "give -o" "$TMP/err"
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090 --rank 0 -o "$TMP/b8.json"
expect_bad_input $P plan --model gpt2-xl --gpus 2xRTX3090 --engine megatron --tokens lots -o "$TMP/b9.json"
for f in b1 b2 b3 b4 b5 b7 b8 b9; do [ ! -e "$TMP/$f.json" ] || { echo "FAIL: $f.json written on bad input"; fails=$((fails+1)); }; done
[ ! -e "$TMP/b6.trace" ] || { echo "FAIL: trace written on bad input"; fails=$((fails+1)); }
for c in memory predict plan; do expect_exit 0 $P $c --help; expect_grep "--engine" "$TMP/out"; done
for o in --tokens --objective --rank; do expect_grep "$o" "$TMP/out"; done
finish
