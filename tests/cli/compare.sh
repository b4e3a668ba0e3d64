#!/usr/bin/env bash
# planner compare: the best plan per cluster in one table, ranked by cost or time; --json; bad input.
. "$(dirname "$0")/../cli_lib.sh"
P=$(realpath "$PLANNER"); ROOT=$(realpath "$ROOT")  # absolute: the bad-input checks run in an empty folder
PRICES="$ROOT/examples/prices/v100-a100-h100.json"
GPUS=8xA100-80GB,8xH100,32xV100-32GB

# The issue's example: ranked by cost, one row per cluster, in well under a second.
start=$(date +%s%N)
expect_exit 0 $P compare --model llama-2-7b --gpus $GPUS --tokens 1T --prices "$PRICES"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$ms" -lt 1000 ] || { echo "FAIL: compare took $ms ms (limit 1000)"; fails=$((fails+1)); }
# The default batch of a pretraining question: about 2M tokens per step (512 x 4096), a multiple of every GPU count.
expect_grep "^Best plan per cluster, global batch 512, seq 4096; ranked by cost to train 1T tokens:" "$TMP/out"
expect_grep "^ 1  8xH100 " "$TMP/out"
[ "$(grep -cE '^ [123]  ' "$TMP/out")" = 3 ] || { echo "FAIL: expected 3 ranked rows"; cat "$TMP/out"; fails=$((fails+1)); }

expect_exit 0 $P compare --model llama-2-7b --gpus $GPUS --tokens 1T --prices "$PRICES" --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
assert j["objective"] == "cost" and j["global_batch"] == 512 and j["seq"] == 4096
rows = j["clusters"]
assert [r["rank"] for r in rows] == [1, 2, 3]
assert sorted(r["cluster"] for r in rows) == ["32xV100-32GB", "8xA100-80GB", "8xH100"]
costs = [r["train"]["cost"] for r in rows]
assert costs == sorted(costs), costs
price = {"A100-80GB-SXM": 9.3, "H100-SXM": 15.0, "V100-32GB": 5.3}
for r in rows:
    t = r["train"]
    assert r["fits"] and r["memory_headroom_bytes"] == r["gpu_capacity_bytes"] - r["per_gpu_peak_bytes"] >= 0
    assert abs(t["days"] - 1e12 / r["tokens_per_second"] / 86400) < 1e-9 * t["days"]
    assert abs(t["cost"] - t["gpu_hours"] * price[r["gpu"]]) < 1e-6 * t["cost"]
    assert r["plan"]["strategy"] and 0 < r["mfu"] < 1
PY

# Same best plans as `plan` finds per cluster.
expect_exit 0 $P plan --model llama-2-7b --gpus 32xV100-32GB --global-batch 32 --top 1 --json -q
best=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["plans"][0]["tokens_per_second"])' "$TMP/out")
expect_exit 0 $P compare --model llama-2-7b --gpus 32xV100-32GB,8xH100 --global-batch 32 --json
python3 -c 'import json,sys; r=[c for c in json.load(open(sys.argv[1]))["clusters"] if c["cluster"]=="32xV100-32GB"][0]; assert abs(r["tokens_per_second"]-float(sys.argv[2]))<1e-6*r["tokens_per_second"]' "$TMP/out" "$best" || fails=$((fails+1))

# No price: ranked by time; no tokens: by throughput, fastest first.
expect_exit 0 $P compare --model llama-2-7b --gpus $GPUS --tokens 300B
expect_grep "ranked by time to train 300B tokens" "$TMP/out"
expect_exit 0 $P compare --model gpt2-xl --gpus 1xRTX3090,2xRTX3090,2x8xH100 --global-batch 32 --seq 1024 --json
python3 - "$TMP/out" <<'PY' || fails=$((fails+1))
import json, sys
j = json.load(open(sys.argv[1]))
assert j["objective"] == "throughput" and j["global_batch"] == 32
tps = [r["tokens_per_second"] for r in j["clusters"] if r["fits"]]
assert tps == sorted(tps, reverse=True) and j["clusters"][0]["cluster"] == "2x8xH100"
PY
# A cluster where nothing fits is listed last, not ranked.
expect_exit 0 $P compare --model llama-2-70b --gpus 1xRTX3090,8xH100 --global-batch 8 --seq 1024
expect_grep "^ -  1xRTX3090 .*no strategy fits" "$TMP/out"
expect_exit 0 $P compare --help
expect_grep "planner compare --model llama-2-7b" "$TMP/out"

# One cluster given as a JSON file is searched like its spec string.
expect_exit 0 $P compare --model gpt2-xl --gpus "$ROOT/examples/clusters/2x3090-nvlink.json" --global-batch 8 --json
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["clusters"]; assert len(c)==1 and c[0]["fits"], c' "$TMP/out" || fails=$((fails+1))

# Bad input: one line, exit 2, nothing on stdout and no file written (run in an empty folder).
mkdir "$TMP/w"; cd "$TMP/w" || exit 1
expect_bad_input $P compare --model llama-2-7b --gpus 8xA100-80GB,,8xH100
expect_bad_input $P compare --model llama-2-7b --gpus 8xA100-80GB,8xB300
expect_bad_input $P compare --model no-such-model --gpus 8xA100-80GB
expect_bad_input $P compare --model llama-2-7b --gpus 8xA100-80GB,8xH100 --price 2
expect_bad_input $P compare --model llama-2-7b --gpus 8xA100-80GB,8xL4 --tokens 1T --prices "$PRICES"
expect_bad_input $P compare --model llama-2-7b --gpus 8xA100-80GB --tokens lots
expect_bad_input $P compare --model llama-2-7b --gpus 8xA100-80GB --global-batch 0
expect_bad_input $P compare --model llama-2-7b
expect_bad_input $P compare --model llama-2-7b --gpus 8xA100-80GB -o out.json
[ -z "$(ls -A "$TMP/w")" ] || { echo "FAIL: bad input wrote files: $(ls -A "$TMP/w")"; fails=$((fails+1)); }
finish
