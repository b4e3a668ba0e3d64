#!/usr/bin/env bash
# Catalog calibration marks: list gpus shows them; predict/plan/memory/compare say when a GPU is uncalibrated.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
expect_exit 0 $P list gpus
expect_grep "^H100-SXM .* validation/h100/kernels " "$TMP/out"
expect_grep "^MI300X .* datasheet, predict only " "$TMP/out"
expect_grep "^L4 .* datasheet only " "$TMP/out"
expect_exit 0 $P list gpus --json
python3 -c 'import json,sys; g={x["name"]:x for x in json.load(open(sys.argv[1]))}; assert g["H200"]["calibrated"]=="validation/h200/kernels" and g["B200"]["calibrated"]=="" and g["Ascend910"]["prediction_only"]' "$TMP/out" || fails=$((fails+1))

for cmd in "predict --strategy tp=2,mbs=1" "memory --strategy tp=2,mbs=1" "plan -q"; do
  expect_exit 0 $P $cmd --model llama-2-7b --gpus 8xL4 --global-batch 16 --seq 2048
  expect_grep "^note: L4 is not calibrated" "$TMP/out"
  expect_exit 0 $P $cmd --model llama-2-7b --gpus 8xL4 --global-batch 16 --seq 2048 --json
  python3 -c '
import json,sys; j=json.load(open(sys.argv[1]))
if "calibration_notes" in j: assert j["calibration_notes"][0].startswith("L4 is not calibrated") and j["plans"][0]["gpu_calibrated"] is False
else: assert j["gpu_calibrated"] is False and j["calibration_note"].startswith("L4 is not calibrated")' "$TMP/out" || fails=$((fails+1))
  # A calibrated GPU: no note, gpu_calibrated true.
  expect_exit 0 $P $cmd --model llama-2-7b --gpus 8xH100 --global-batch 16 --seq 2048
  if grep -q "not calibrated" "$TMP/out"; then echo "FAIL: note for a calibrated GPU: $cmd"; fails=$((fails+1)); fi
done
expect_exit 0 $P predict --model llama-2-7b --gpus 8xMI300X --strategy zero=1,mbs=1 --global-batch 16 --seq 2048
expect_grep "^note: MI300X is not calibrated.*prediction only" "$TMP/out"
expect_exit 0 $P compare --model llama-2-7b --gpus 8xH100,8xB200 --global-batch 64 --json
python3 -c 'import json,sys; c={x["cluster"]:x for x in json.load(open(sys.argv[1]))["clusters"]}; assert c["8xH100"]["gpu_calibrated"] and not c["8xB200"]["gpu_calibrated"] and "calibration_note" in c["8xB200"]' "$TMP/out" || fails=$((fails+1))
expect_exit 0 $P compare --model llama-2-7b --gpus 8xH100,8xB200 --global-batch 64
expect_grep "^note: B200 is not calibrated" "$TMP/out"
# A profile measured on groups of up to 2 GPUs (its collective_groups table)
# says in every answer that a group of 4 extrapolates, naming both sizes; a
# plan whose groups were measured says nothing; neither does a profile without
# the table.
cat >"$TMP/groups2.json" <<'JSON'
{"format": "planner-profile", "collective_groups": [{"group_size": 2, "link": "nvlink", "all_reduce_efficiency": 0.6,
 "reduce_scatter_efficiency": 0.5, "all_gather_efficiency": 0.5, "broadcast_efficiency": 0.7,
 "base_latency_seconds": 2e-5, "compute_slowdown_beside_comm": 1.1, "comm_slowdown_beside_compute": 2.0}]}
JSON
X="largest measured group is 2 GPUs, this plan's dp group has 4"
Q=(--model gpt2-xl --gpus 4xH100-SXM --global-batch 32 --profile "$TMP/groups2.json")
for cmd in "predict --strategy dp=4,zero=1,mbs=4" "memory --strategy dp=4,zero=1,mbs=4" "plan -q"; do
  expect_exit 0 $P $cmd "${Q[@]}" && expect_grep "^[Nn]ote: collectives extrapolated: .*$X" "$TMP/out"
  expect_exit 0 $P $cmd "${Q[@]}" --json && expect_grep "collectives extrapolated: .*$X" "$TMP/out"
done
expect_exit 0 $P compare --model gpt2-xl --gpus 4xH100-SXM,2xH100-SXM --global-batch 32 --profile "$TMP/groups2.json"
expect_grep "^note: collectives extrapolated: .*$X" "$TMP/out"
expect_exit 0 $P compare --model gpt2-xl --gpus 4xH100-SXM,2xH100-SXM --global-batch 32 --profile "$TMP/groups2.json" --json
expect_grep "collectives extrapolated: .*$X" "$TMP/out"
expect_exit 0 $P predict --strategy dp=2,zero=1,mbs=4 --model gpt2-xl --gpus 2xH100-SXM --global-batch 32 --profile "$TMP/groups2.json"
! grep -q "extrapolated" "$TMP/out" || { echo "FAIL: a measured group size noted as extrapolated"; fails=$((fails+1)); }
expect_exit 0 $P predict --strategy dp=4,zero=1,mbs=4 --model gpt2-xl --gpus 4xH100-SXM --global-batch 32
! grep -q "extrapolated" "$TMP/out" || { echo "FAIL: a profile without the table noted as extrapolated"; fails=$((fails+1)); }
finish
