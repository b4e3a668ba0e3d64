#!/usr/bin/env bash
# planner exec with several ranks on the CPU (MPI): a dp=2 ZeRO-3 plan started
# by planner exec itself; a pp=2 plan; a rank killed mid-step ends the job quickly, naming
# the rank, with no result file; plans needing more ranks than cores, or a
# wrong mpirun -np, or an unknown PLANNER_CP_ATTENTION, are refused with exit
# 2 before anything runs.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
if [ "${PLANNER_HAS_RUNTIME:-OFF}" != ON ]; then echo "runtime not built: skipped"; finish; exit $?; fi
command -v mpirun >/dev/null || { echo "mpirun missing: skipped"; finish; exit $?; }
PLAN="$ROOT/examples/plans/tiny-cpu-dp2-zero3.json"
MPI=(mpirun -np 2 --oversubscribe); [ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)

# planner exec starts the two ranks itself; rank 0 reports for both.
expect_exit 0 $P exec "$PLAN" --device cpu --steps 2 --warmup 1 --oversubscribe -q -o "$TMP/r.json"
expect_grep "ranks: 2" "$TMP/out"
python3 - "$TMP/r.json" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1]))
m = r["measurement"]
assert m["world"] == 2 and len(m["ranks"]) == 2, m["ranks"]
assert m["samples_per_step"] == 8
assert len(m["losses"]) == 3 and all(l == l for l in m["losses"])
assert r["plan"]["strategy"]["zero"] == 3
PY
# --trace: one Chrome trace with the predicted step (stage 0) and the measured
# one of each rank (every action of the step program, in its order).
expect_exit 0 $P exec "$PLAN" --device cpu --steps 1 --warmup 1 --oversubscribe -q --trace "$TMP/trace.json"
python3 - "$TMP/trace.json" <<'PY' || fails=$((fails+1))
import json, sys
t = json.load(open(sys.argv[1]))
ev = [e for e in t["traceEvents"] if e["ph"] == "X"]
pids = {e["pid"] for e in ev}
assert {0, 1000, 1001} <= pids, pids
for pid in (1000, 1001):
    names = [e["name"] for e in sorted((e for e in ev if e["pid"] == pid), key=lambda e: e["ts"])]
    assert names[:3] == ["0G0", "0G1", "0F0.0"], names[:3]   # ZeRO-3: gather, prefetch, forward
    assert "0Opt" in names and "0Sync" in names
PY
# A pipeline plan (pp=2, 1F1B, tied embeddings): each rank runs its stage's
# action list; the trace names each rank's stage; per-stage peaks are compared.
PP2="$ROOT/examples/plans/tiny-cpu-pp2.json"
expect_exit 0 $P exec "$PP2" --device cpu --steps 1 --warmup 1 --oversubscribe -q -o "$TMP/pp.json" --trace "$TMP/pptrace.json"
expect_grep "stage1_peak" "$TMP/out"
python3 - "$TMP/pp.json" "$TMP/pptrace.json" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1]))
assert r["plan"]["strategy"]["pp"] == 2 and r["measurement"]["world"] == 2
assert all(l == l for l in r["measurement"]["losses"])
# Each rank's own memory categories: rank 0's are the report's; rank 1 (the
# head, tied embeddings) holds logits, rank 0 (no head) none.
ranks = r["measurement"]["ranks"]
assert ranks[0]["categories"] == r["measurement"]["memory"]["categories"], ranks[0]
assert ranks[1]["categories"]["logits_loss"] > 0 and ranks[0]["categories"]["logits_loss"] == 0, ranks
assert sum(ranks[1]["categories"].values()) == ranks[1]["peak_bytes"], ranks[1]
# The comparison's memory rows take the fullest rank's categories (as validate
# does), not rank 0's: here the fullest rank is the one with the head.
full = max(ranks, key=lambda x: x["peak_bytes"])
c = r["comparison"]
for k, v in full["categories"].items():
    assert c["memory." + k]["measured"] == v or (v == 0 and c["memory." + k]["measured"] in (0, None)), (k, v, c["memory." + k])
assert c["memory.peak_total"]["measured"] == full["peak_bytes"], c["memory.peak_total"]
t = json.load(open(sys.argv[2]))
ev = [e for e in t["traceEvents"] if e["ph"] == "X"]
def names(pid): return [e["name"] for e in sorted((e for e in ev if e["pid"] == pid), key=lambda e: e["ts"])]
a, b = names(1000), names(1001)
assert a[:3] == ["0F0.0", "0F0.1", "0SF0"], a[:3]     # stage 0: embedding, layer 0, send
assert b[:2] == ["1RF0", "1F0.2"], b[:2]              # stage 1: receive, then its first unit
assert "0RB0" in a and "1SB0" in b
meta = [e for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == 1001]
assert "stage 1" in meta[0]["args"]["name"], meta
PY
# A tensor-parallel plan with sequence parallelism (tp=2, sp): the ranks hold
# halves of the split matrices; the report counts the whole model.
expect_exit 0 $P exec "$ROOT/examples/plans/tiny-cpu-tp2-sp.json" --device cpu --steps 1 --warmup 1 --oversubscribe -q -o "$TMP/tp.json"
python3 - "$TMP/tp.json" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1]))
s, m = r["plan"]["strategy"], r["measurement"]
assert s["tp"] == 2 and s["sp"] and m["world"] == 2, (s, m["world"])
assert all(l == l for l in m["losses"])
assert m["params"] > 100000, m["params"]   # the whole model, not one rank's half
PY
# Inside an existing mpirun launch: the same result.
expect_exit 0 "${MPI[@]}" $P exec "$PLAN" --device cpu --steps 2 --warmup 1 -q -o "$TMP/r2.json"
python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['measurement']['losses']; b=json.load(open(sys.argv[2]))['measurement']['losses']; assert a==b, (a,b)" "$TMP/r.json" "$TMP/r2.json" || { echo "FAIL: losses differ between the two launches"; fails=$((fails+1)); }

# A rank killed at step 2 (test hook): the job ends within 60 s, the message
# names the rank, nothing is written.
start=$(date +%s)
PLANNER_TEST_KILL=1:2 $P exec "$PLAN" --device cpu --steps 5 --warmup 1 --oversubscribe -q -o "$TMP/killed.json" >"$TMP/out" 2>"$TMP/err"; rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" = 0 ] || [ "$took" -gt 60 ]; then echo "FAIL: killed rank: exit $rc after $took s"; fails=$((fails+1)); else passes=$((passes+1)); fi
expect_grep "rank 1" "$TMP/err"
[ ! -e "$TMP/killed.json" ] || { echo "FAIL: result written after a rank died"; fails=$((fails+1)); }

# Refused before launch: more ranks than cores (no --oversubscribe), a wrong -np.
# (A legal plan of 1024 GPUs: 512 nodes of 2, as check_compat wants dp*tp*pp = GPUs.)
# (The strategy's text must agree with its fields: dp changes in both.)
sed 's/"dp": 2/"dp": 1024/; s/dp=2,/dp=1024,/; s/"global_batch": 8/"global_batch": 4096/; s/"nodes": 1,/"nodes": 512,/' "$PLAN" > "$TMP/dp1024.json"
expect_bad_input $P exec "$TMP/dp1024.json" --device cpu -o "$TMP/r3.json"
expect_grep "1024 ranks" "$TMP/err"
expect_exit 2 mpirun -np 3 --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root ) $P exec "$PLAN" --device cpu -q -o "$TMP/r4.json"
expect_grep "needs 2 ranks" "$TMP/err"
for f in r3 r4; do [ ! -e "$TMP/$f.json" ] || { echo "FAIL: $f.json written on bad input"; fails=$((fails+1)); }; done

# PLANNER_CP_ATTENTION (runtime/model/attention_block.hpp; docs/RUNTIME.md):
# 'flash' or unset/empty; any other value is refused before any rank starts,
# exit 2 with one line naming the variable, the value and the accepted values,
# and nothing written: started by planner exec, inside an mpirun launch, and
# on a plan without cp. A cp=2 plan of the tiny model (bf16: ring attention
# runs the flash kernels) from the tp=2 example.
python3 - "$ROOT/examples/plans/tiny-cpu-tp2-sp.json" "$TMP/cp2.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); s = p["strategy"]
s.update(tp=1, cp=2, sp=False, precision="bf16")
s["text"] = "dp=1,tp=1,pp=1,cp=2,zero=0,offload=none,ckpt=none,mbs=2,gas=2,schedule=1f1b,vpp=1,precision=bf16,sp=0"
json.dump(p, open(sys.argv[2], "w"))
PY
expect_bad_input env PLANNER_CP_ATTENTION=flsh $P exec "$TMP/cp2.json" --device cpu --steps 1 --warmup 0 --oversubscribe -q -o "$TMP/cpbad.json" \
  && expect_grep "^planner: PLANNER_CP_ATTENTION='flsh' is not an accepted value: 'flash' .*unset or empty" "$TMP/err"
expect_exit 2 env PLANNER_CP_ATTENTION=cudnn "${MPI[@]}" $P exec "$TMP/cp2.json" --device cpu --steps 1 --warmup 0 -q -o "$TMP/cpbad.json"
expect_grep "PLANNER_CP_ATTENTION='cudnn' is not an accepted value" "$TMP/err"
expect_bad_input env PLANNER_CP_ATTENTION=FLASH $P exec "$ROOT/examples/plans/tiny-cpu.json" --device cpu --steps 1 --warmup 0 -q -o "$TMP/cpbad.json"
[ ! -e "$TMP/cpbad.json" ] || { echo "FAIL: a result was written with a bad PLANNER_CP_ATTENTION"; fails=$((fails+1)); }
# PLANNER_FUSED_KERNELS (runtime/model/fused_ops.hpp): '0', '1' or unset; anything else refused before a step.
expect_bad_input env PLANNER_FUSED_KERNELS=off $P exec "$ROOT/examples/plans/tiny-cpu.json" --device cpu --steps 1 --warmup 0 -q -o "$TMP/fkbad.json" \
  && expect_grep "^planner: PLANNER_FUSED_KERNELS='off' is not an accepted value" "$TMP/err"
[ ! -e "$TMP/fkbad.json" ] || { echo "FAIL: a result was written with a bad PLANNER_FUSED_KERNELS"; fails=$((fails+1)); }
expect_exit 0 env PLANNER_FUSED_KERNELS=0 $P exec "$ROOT/examples/plans/tiny-cpu.json" --device cpu --steps 1 --warmup 0 -q -o "$TMP/fk0.json"
# The accepted values run (on the CPU both give LibTorch's CPU flash blocks).
for v in flash ""; do
  expect_exit 0 env PLANNER_CP_ATTENTION="$v" $P exec "$TMP/cp2.json" --device cpu --steps 1 --warmup 0 --oversubscribe -q -o "$TMP/cp2r.json"
  python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['measurement']; assert m['world'] == 2 and all(l == l for l in m['losses']), m['losses']" "$TMP/cp2r.json" \
    || { echo "FAIL: cp=2 run with PLANNER_CP_ATTENTION='$v'"; fails=$((fails+1)); }
  rm -f "$TMP/cp2r.json"
done
# A MoE plan at ep=2: exec measures the routing's imbalance over the ep
# group (the busiest rank's rows per layer over the mean: between 1 and 2 at
# ep=2; the largest layer's at least that) and says it beside the assumption.
echo '{"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2}' > "$TMP/moe.json"
expect_exit 0 $P predict --model "$TMP/moe.json" --gpus 2xH100 --strategy dp=2,ep=2,mbs=2,precision=fp32 --seq 64 --global-batch 4 -o "$TMP/moe-ep2.json"
expect_exit 0 $P exec "$TMP/moe-ep2.json" --device cpu --steps 2 --warmup 1 --oversubscribe -q -o "$TMP/moe-r.json"
python3 - "$TMP/moe-r.json" <<'PY' || fails=$((fails+1))
import json, sys
m = json.load(open(sys.argv[1]))["measurement"]
i, big = m["moe_imbalance"], m["moe_imbalance_largest"]
assert 1.0 <= i <= 2.0 and i <= big <= 2.0, (i, big)
assert any("busiest rank of the ep group" in n and "assumed 1.00" in n for n in m["notes"]), m["notes"]
PY
# --moe-routing balanced (runtime/model/moe.hpp): token t of a micro-batch to
# experts (t*k + j) mod E. seq 64 x mbs 2 = 128 tokens, k = 2: 256
# assignments, 64 per expert, 128 rows on each ep rank in every layer forward,
# so the measured imbalance is exactly 1; the result says which routing ran.
expect_exit 0 $P exec "$TMP/moe-ep2.json" --device cpu --steps 2 --warmup 1 --oversubscribe -q --moe-routing balanced -o "$TMP/moe-b.json"
python3 - "$TMP/moe-b.json" "$TMP/moe-r.json" <<'PY' || fails=$((fails+1))
import json, sys
r = json.load(open(sys.argv[1])); m = r["measurement"]
assert m["moe_routing"] == "balanced" and r["options"]["moe_routing"] == "balanced", (m["moe_routing"], r["options"])
assert m["moe_imbalance"] == 1.0 and m["moe_imbalance_largest"] == 1.0, (m["moe_imbalance"], m["moe_imbalance_largest"])
assert any("balanced routing (benchmark mode" in n for n in m["notes"]), m["notes"]
learned = json.load(open(sys.argv[2]))["measurement"]
assert learned["moe_routing"] == "learned" and not any("benchmark mode" in n for n in learned["notes"])
PY
expect_grep "note: mixture of experts: balanced routing \(benchmark mode" "$TMP/out"
# A bad value, and balanced on a dense model: one line, exit 2, nothing written.
expect_bad_input $P exec "$TMP/moe-ep2.json" --device cpu --oversubscribe -q --moe-routing even -o "$TMP/moe-bad.json" \
  && expect_grep "^planner: --moe-routing 'even' is not one of learned .* or balanced" "$TMP/err"
expect_bad_input $P exec "$ROOT/examples/plans/tiny-cpu.json" --device cpu -q --moe-routing balanced -o "$TMP/moe-bad.json" \
  && expect_grep "^planner: plan .*--moe-routing balanced needs a mixture-of-experts model; 'tiny-gpt' is dense" "$TMP/err"
[ ! -e "$TMP/moe-bad.json" ] || { echo "FAIL: a result was written with a refused --moe-routing"; fails=$((fails+1)); }
# planner validate passes it to every plan's exec and records it; a bad value
# or a dense plan among those chosen is refused before anything runs.
mkdir -p "$TMP/vm"; cp "$TMP/moe.json" "$TMP/vm/moe.json"; cp "$ROOT/tests/data/tiny-gpt2.json" "$TMP/vm/"
cat > "$TMP/vm/sweep.json" <<'JS'
{"format": "planner-sweep", "version": 1, "name": "tiny MoE", "steps": 1, "warmup": 0, "held_out": "B",
 "defaults": {"gpus": "2xH100", "seq": 64},
 "plans": [{"name": "moe-dp2-ep2", "half": "B", "model": "moe.json", "strategy": "dp=2,ep=2,mbs=2,precision=fp32", "global_batch": 4},
           {"name": "dense", "half": "A", "model": "tiny-gpt2.json", "gpus": "1xH100", "strategy": "mbs=2,precision=fp32", "global_batch": 2}]}
JS
expect_bad_input $P validate "$TMP/vm/sweep.json" -o "$TMP/vm/out" --device cpu --oversubscribe --moe-routing Balanced \
  && expect_grep "^planner: --moe-routing 'Balanced' is not one of learned" "$TMP/err"
expect_bad_input $P validate "$TMP/vm/sweep.json" -o "$TMP/vm/out" --device cpu --oversubscribe --moe-routing balanced \
  && expect_grep "^planner: --moe-routing balanced needs mixture-of-experts models; plan 'dense' \(tiny-gpt2\) is dense" "$TMP/err"
[ ! -e "$TMP/vm/out" ] || { echo "FAIL: validate wrote before refusing --moe-routing"; fails=$((fails+1)); }
expect_exit 0 $P validate "$TMP/vm/sweep.json" -o "$TMP/vm/out" --device cpu --oversubscribe --moe-routing balanced --half B --no-plots -q
expect_grep "^mixture of experts: balanced routing \(benchmark mode" "$TMP/out"
python3 - "$TMP/vm/out" <<'PY' || fails=$((fails+1))
import json, sys
rep = json.load(open(sys.argv[1] + "/report.json"))
assert rep["moe_routing"] == "balanced" and rep["plans"][0]["status"] == "ran", (rep["moe_routing"], rep["plans"][0]["status"])
m = json.load(open(sys.argv[1] + "/runs/moe-dp2-ep2.json"))["measurement"]
assert m["moe_routing"] == "balanced" and m["moe_imbalance"] == 1.0, (m["moe_routing"], m["moe_imbalance"])
PY
finish
