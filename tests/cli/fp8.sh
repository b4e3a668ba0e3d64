#!/usr/bin/env bash
# precision=fp8 from the command line: predict on an H100 (the note names the
# FP8 peak and the MFU's bf16 peak), refusals on a GPU without FP8 and in the
# exports (exit 2, one line), the opt-in search (`--allow fp8`), and exec
# with tp=2 (with and without sp) on the CPU.
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
# exec: fp8 under tensor parallelism (tp=2, with and without sp) on the CPU,
# where this LibTorch runs at::_scaled_mm (runtime/model/fp8_linear.hpp), and
# the refusal of a plan whose FFN width per tp rank is not a multiple of 16.
if [ "${PLANNER_HAS_RUNTIME:-0}" = 1 ]; then
  expect_exit 0 $P predict --model llama-3.2-1b --gpus 2xH100 --strategy tp=2,mbs=1,precision=fp8 --seq 2048 \
    -o "$TMP/fp8tp.json"
  python3 - "$ROOT/examples/plans/tiny-cpu-tp2-sp.json" "$TMP" <<'PY' || fails=$((fails+1))
import json, sys
p = json.load(open(sys.argv[1]))
def write(name, sp, ffn):
    q = json.loads(json.dumps(p))
    s = q["strategy"]
    s["precision"], s["sp"] = "fp8", sp
    s["text"] = s["text"].replace("precision=fp32", "precision=fp8").replace("sp=1", "sp=%d" % sp)
    q["model"]["ffn"] = ffn
    json.dump(q, open(sys.argv[2] + "/" + name, "w"))
write("fp8tp2sp.json", True, 256)
write("fp8tp2.json", False, 256)
write("fp8tp2odd.json", False, 272)  # 272 / 2 = 136 columns per rank
PY
  if python3 -c 'import torch, sys; a = torch.ones(16, 16).to(torch.float8_e4m3fn); o = torch.ones(1); torch._scaled_mm(a, a.t(), o, o, out_dtype=torch.bfloat16)' 2>/dev/null; then
    for plan in fp8tp2sp fp8tp2; do
      expect_exit 0 $P exec "$TMP/$plan.json" --device cpu --steps 1 --warmup 1 --oversubscribe -q -o "$TMP/$plan-r.json"
      python3 - "$TMP/$plan-r.json" <<'PY' || fails=$((fails+1))
import json, math, sys
r = json.load(open(sys.argv[1]))
s, m = r["plan"]["strategy"], r["measurement"]
assert s["precision"] == "fp8" and s["tp"] == 2 and m["world"] == 2, (s, m["world"])
assert all(math.isfinite(x) for x in m["losses"]), m["losses"]
PY
    done
  fi
  expect_bad_input $P exec "$TMP/fp8tp2odd.json" --steps 1 --warmup 0 --device cpu --oversubscribe
  expect_grep "136 is not" "$TMP/err"
fi
finish
