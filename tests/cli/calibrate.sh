#!/usr/bin/env bash
# planner calibrate on the CPU (quick sizes): writes a profile that predict,
# memory and exec accept; --from re-fits it to the same values; under mpirun
# the collectives are measured; bad input exits 2 with one line and writes
# nothing. And the memory edge: exec of a plan predicted not to fit warns
# before it starts and records "predicted_fit": false.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
expect_exit 0 $P calibrate --help && expect_grep "Examples" "$TMP/out"
for c in memory predict plan max-model exec; do
  expect_exit 0 $P $c --help && expect_grep "headroom" "$TMP/out"
done
PLAN="$ROOT/examples/plans/tiny-cpu.json"

# Bad input: nothing written, exit 2, one line.
expect_bad_input $P memory --plan "$PLAN" --headroom lots && expect_grep "headroom" "$TMP/err"
expect_bad_input $P plan --model gpt2 --gpus 1xH100 --headroom 150%
expect_bad_input $P calibrate --from /nonexistent/measured.json -o "$TMP/x.json"
expect_bad_input $P calibrate --device cpu --quick -o /nonexistent/dir/p.json
[ ! -e "$TMP/x.json" ] || { echo "FAIL: profile written on bad input"; fails=$((fails+1)); }

# --onto: only the fitted fields of a profile file change (here the MoE host
# line by hand: forward 2.0 ms at 2048 rows and 3.4 ms at 16384, backward 3 ms
# at both), its source says where they came from; another GPU's is refused.
python3 - "$TMP/meas.json" <<'PY'
import json, sys
pts = [{"tokens": 1024, "rows": 2048, "forward_seconds": 0.0020, "backward_seconds": 0.003},
       {"tokens": 8192, "rows": 16384, "forward_seconds": 0.0034, "backward_seconds": 0.003}]
json.dump({"format": "planner-calibration", "device": "cuda", "created": "2026-11-27T00:00:00Z",
           "machine": {"gpu_name": "NVIDIA H100 80GB HBM3", "hostname": "h"}, "moe_host": {"ep": 1, "points": pts}},
          open(sys.argv[1], "w"))
PY
python3 - "$ROOT/costmodel/profiles/H100-SXM.json" "$TMP/h100-base.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
json.dump({k: (0 if k.startswith("moe_host") else v) for k, v in p.items()}, open(sys.argv[2], "w"))  # no MoE host figures
PY
cp "$TMP/h100-base.json" "$TMP/h100.json"
expect_exit 0 $P calibrate --from "$TMP/meas.json" --onto "$TMP/h100.json" -o "$TMP/h100.json"
python3 - "$TMP/h100-base.json" "$TMP/h100.json" <<'PY' || fails=$((fails+1))
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
slope = 0.0014 / (16384 - 2048)
assert abs(b["moe_host_forward_row_seconds"] - slope) < 1e-15, b["moe_host_forward_row_seconds"]
assert abs(b["moe_host_forward_seconds"] - (0.0020 - slope * 2048)) < 1e-12, b["moe_host_forward_seconds"]
assert b["moe_host_backward_seconds"] == 0.003 and b["moe_host_backward_row_seconds"] == 0
changed = {k for k in b if a.get(k) != b.get(k)}
assert changed == {"source", "moe_host_forward_seconds", "moe_host_forward_row_seconds", "moe_host_backward_seconds"}, changed
assert b["source"].startswith(a["source"]) and "merged from planner calibrate, 2026-11-27T00:00:00Z" in b["source"]
PY
expect_exit 0 $P predict --model mixtral-8x7b --gpus 8x8xH100 --strategy tp=2,dp=32,ep=8,zero=1,sp=1,mbs=1,gas=4 --profile "$TMP/h100.json"
expect_grep "at least the host's time" "$TMP/out"
expect_grep "measured that host time with one GPU only" "$TMP/out"
expect_bad_input $P calibrate --from "$TMP/meas.json" --onto "$TMP/h100-base.json" --fields moe_host_ep_forward_seconds -o "$TMP/y.json"
expect_grep "not a field this calibration fitted" "$TMP/err"
expect_bad_input $P calibrate --from "$TMP/meas.json" --fields moe_host_forward_seconds -o "$TMP/y.json"
cp "$TMP/h100-base.json" "$TMP/h100-one.json"
expect_exit 0 $P calibrate --from "$TMP/meas.json" --onto "$TMP/h100-one.json" --fields moe_host_backward_seconds -o "$TMP/h100-one.json"
python3 - "$TMP/h100-base.json" "$TMP/h100-one.json" <<'PY' || fails=$((fails+1))
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert {k for k in b if a.get(k) != b.get(k)} == {"source", "moe_host_backward_seconds"}
PY
expect_bad_input $P calibrate --from "$TMP/meas.json" --onto "$ROOT/costmodel/profiles/H200.json" -o "$TMP/y.json"
expect_grep "profile of H200" "$TMP/err"
[ ! -e "$TMP/y.json" ] || { echo "FAIL: --onto wrote on bad input"; fails=$((fails+1)); }

if [ "${PLANNER_HAS_RUNTIME:-OFF}" != ON ]; then
  expect_exit 1 $P calibrate --device cpu --quick && expect_grep "without LibTorch" "$TMP/err"
  echo "runtime not built: measuring skipped"; finish; exit $?
fi

expect_bad_input $P calibrate --device tpu -o "$TMP/x.json" && expect_grep "auto\|cuda\|cpu" "$TMP/err"
expect_exit 0 $P calibrate --device cpu --quick -o "$TMP/cpu.json"
expect_grep "^calibrate: gemm fp32" "$TMP/err"          # progress on stderr
expect_grep "gemm_efficiency_fp32" "$TMP/out"           # the table on stdout
expect_grep "Wrote the profile" "$TMP/out"
python3 - "$TMP/cpu.json" <<'PY' || fails=$((fails+1))
import json, sys
p = json.load(open(sys.argv[1]))
assert p["format"] == "planner-profile" and p["gpu"] == "cpu"
c = p["calibration"]
for k in ("gemm", "attention", "memory_kernels", "host_memcpy", "cpu_adam", "fits", "notes"):
    assert k in c, k
# The GEMMs and attention of a training step of each family, timed as calibrate times its points.
ins = c["in_step"]
# Two layers (quick): each distinct GEMM copied once and counted, 27 calls; the attention counted twice.
assert len(ins) == 3 and all(r["layers"] == 2 and r["gemms"] == 27 and r["alone_gemm_seconds"] > 0 for r in ins), ins
assert all(sum(g["count"] for g in r["shapes"]) == 27 and r["attention"][0]["count"] == 2 for r in ins), ins
assert {g["precision"] for g in c["gemm"]} >= {"fp32"}
assert any("100" in g["label"] for g in c["gemm"]), "an unaligned width"
for g in c["gemm"]:
    assert g["seconds"] > 0 and "model_seconds" in g and "efficiency" in g
f = c["fits"]
for k in ("gemm_efficiency_fp32", "memory_efficiency", "strided_kernel_relative", "reduction_kernel_relative",
          "attention_forward_relative", "cpu_adam_params_per_second", "kernel_overhead_seconds"):
    assert k in f and f[k]["from"], k
    assert abs(f[k]["value"] - p[k]) <= 1e-12 * abs(p[k]), k      # the fit is what the profile holds
assert abs(p["cpu_adam_params_per_second"] - c["cpu_adam"]["params"] / c["cpu_adam"]["seconds"]) < 1e-6 * p["cpu_adam_params_per_second"]
assert any("one rank" in n for n in c["notes"]), "collectives skipped with a note"
PY
# A CPU profile is refused for the plan's GPU (issue 28, finding 8), and taken
# with --profile-any, with a note saying so.
expect_bad_input $P predict --plan "$PLAN" --profile "$TMP/cpu.json" --json
expect_grep "measured on the CPU" "$TMP/err"
expect_exit 0 $P predict --plan "$PLAN" --profile "$TMP/cpu.json" --profile-any --json
expect_grep "profile-any" "$TMP/out"
expect_exit 0 $P memory --plan "$PLAN" --profile "$TMP/cpu.json" --profile-any --headroom 1GiB --json
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['gpu_headroom_bytes']==2**30, j['gpu_headroom_bytes']" "$TMP/out" || fails=$((fails+1))
# exec --device cpu (issue 28, finding 5): against the GPU prediction the times,
# the CUDA context and the peaks are shown, not compared (no "-99.7%"); with the
# CPU profile they are compared. Zero predicted against zero measured: a dash.
expect_exit 0 $P exec "$PLAN" --steps 2 --warmup 1 --device cpu -q -o "$TMP/ex_gpu_pred.json"
expect_exit 0 $P exec "$PLAN" --steps 2 --warmup 1 --device cpu -q --profile "$TMP/cpu.json" -o "$TMP/ex_cpu_pred.json"
expect_exit 0 $P exec "$PLAN" --steps 2 --warmup 1 --device cpu
expect_grep "not compared" "$TMP/out"
expect_grep "comm_buffers .*—" "$TMP/out"
python3 - "$TMP/ex_gpu_pred.json" "$TMP/ex_cpu_pred.json" <<'PY' || fails=$((fails+1))
import json, sys
g, c = (json.load(open(f)) for f in sys.argv[1:3])
for k in ("step_seconds", "tokens_per_second", "memory.overhead", "memory.peak_total"):
    assert g["comparison"][k]["error_pct"] is None, (k, g["comparison"][k])
assert g["comparison"]["memory.parameters"]["error_pct"] is not None
assert any("not compared" in n for n in g["measurement"]["notes"]), g["measurement"]["notes"]
assert c["comparison"]["step_seconds"]["error_pct"] is not None, c["comparison"]["step_seconds"]
assert any("predicted with the CPU profile" in n for n in c["measurement"]["notes"]), c["measurement"]["notes"]
PY
# Re-fitting the saved measurements gives the same profile.
expect_exit 0 $P calibrate --from "$TMP/cpu.json" -o "$TMP/refit.json" --json
python3 - "$TMP/cpu.json" "$TMP/refit.json" <<'PY' || fails=$((fails+1))
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
for k in a:
    if k not in ("calibration",):
        assert a[k] == b[k], (k, a[k], b[k])
PY
expect_bad_input $P calibrate --from "$TMP/cpu.json" --gpu H100 && expect_grep "CPU" "$TMP/err"

# Two ranks: the collectives over MPI (CPU tensors).
if command -v mpirun >/dev/null; then
  MPI=(mpirun -np 2 --oversubscribe); [ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
  expect_exit 0 "${MPI[@]}" $P calibrate --device cpu --quick -q -o "$TMP/cpu2.json"
  python3 - "$TMP/cpu2.json" <<'PY' || fails=$((fails+1))
import json, sys
c = json.load(open(sys.argv[1]))["calibration"]
ops = {x["op"] for x in c["collectives"]}
assert ops == {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send_recv"}, ops
assert all(x["backend"] == "mpi" and x["group_size"] == 2 and x["seconds"] > 0 for x in c["collectives"])
assert c["ranks"] == 2
# Compute beside the collectives: both measured on every rank at once (the fit leaves the CPU's out).
cb = c["compute_beside_comm"]
loop = [x for x in cb if "payload" not in x]
assert [x["op"] for x in loop] == ["all_reduce", "all_gather"], cb
assert all(x["calls"] >= 4 and x["compute_alone_seconds"] > 0 and x["slowdown"] >= 1 for x in loop), cb
# And beside the runtime's own layers' backward, a collective after each layer but the last:
# each op with each layer's gradients (fitted) and sized to a layer's time (a diagnosis).
lay = [x for x in cb if "payload" in x]
assert [(x["op"], x["payload"]) for x in lay] == [("all_reduce", "layers"), ("all_reduce", "layers_time"),
                                                  ("reduce_scatter", "layers"), ("reduce_scatter", "layers_time")], cb
assert all(x["calls"] == x["layers"] - 1 >= 2 and x["layer_seconds"] > 0 and x["slowdown"] >= 1 and x["bytes"] > 0
           and abs(x["compute_alone_seconds"] - x["layers"] * x["layer_seconds"]) < 1e-12 for x in lay), lay
# Tensor-parallel collectives between GEMMs: the three ops, each chain timed with its parts apart.
tc = c["tp_chain"]
assert [x["op"] for x in tc] == ["all_reduce", "all_gather", "reduce_scatter"], tc
assert all(x["chain_seconds"] > 0 and x["gemms_seconds"] > 0 and x["collectives_seconds"] > 0 for x in tc), tc
assert all(abs(x["extra_seconds"] * x["calls"] - (x["chain_seconds"] - x["gemms_seconds"] - x["collectives_seconds"]))
           <= 1e-9 for x in tc), tc
# Each operation's rate relative to the all-reduce's: not fitted over MPI (kept at 1).
p = json.load(open(sys.argv[1]))
assert p["reduce_scatter_relative"] == 1 and p["tp_collective_extra_seconds"] == 0, p
# The CPU AdamW with both ranks at once: the node's rate is what the profile keeps.
n = c["cpu_adam_node"]
assert n["processes_per_node"] == 2 and len(n["per_process_params_per_second"]) == 2, n
assert all(r > 0 for r in n["per_process_params_per_second"]), n
assert abs(n["node_params_per_second"] - sum(n["per_process_params_per_second"])) <= 1e-9 * n["node_params_per_second"], n
p = json.load(open(sys.argv[1]))
assert p["cpu_adam_params_per_second"] == n["node_params_per_second"], (p["cpu_adam_params_per_second"], n)
assert c["nodes"] == 1 and c["node_of_rank"] == [0, 0], c["node_of_rank"]
assert all(x["pair"] == "same_node" for x in c["collectives"] if x["op"] == "send_recv")
PY
  # Four ranks as two "nodes" of two, the node from the environment
  # (PLANNER_NODE, as SLURM_NODEID on a cluster): every group size a 4-rank
  # plan uses (2 inside a node, 4 across both), send/recv inside a node and
  # across, compute beside the collectives per group size, and the local size
  # (2 per node) from the node the environment gave.
  MPI4=(mpirun -np 4 --oversubscribe); [ "$(id -u)" = 0 ] && MPI4+=(--allow-run-as-root)
  expect_exit 0 "${MPI4[@]}" bash -c 'PLANNER_NODE=$((OMPI_COMM_WORLD_RANK / 2)) exec "$0" calibrate --device cpu --quick -q -o "$1"' \
    $P "$TMP/cpu4.json"
  python3 - "$TMP/cpu4.json" <<'PY' || fails=$((fails+1))
import json, sys
c = json.load(open(sys.argv[1]))["calibration"]
assert c["ranks"] == 4 and c["nodes"] == 2 and c["node_of_rank"] == [0, 0, 1, 1], (c["nodes"], c["node_of_rank"])
pts = c["collectives"]
sizes = {(x["op"], x["group_size"], x["nodes"]) for x in pts if x["op"] != "send_recv"}
for op in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
    assert (op, 2, 1) in sizes and (op, 4, 2) in sizes, sizes
pairs = sorted({x["pair"] for x in pts if x["op"] == "send_recv"})
assert pairs == ["across_nodes", "same_node"], pairs
assert all(x["seconds"] > 0 for x in pts)
assert sorted({x["group_size"] for x in c["compute_beside_comm"]}) == [2, 4], c["compute_beside_comm"]
assert c["cpu_adam_node"]["processes_per_node"] == 2, c["cpu_adam_node"]
PY
  # Without PLANNER_NODE the four ranks share one node.
  expect_exit 0 "${MPI4[@]}" $P calibrate --device cpu --quick -q -o "$TMP/cpu4one.json"
  python3 -c "
import json, sys
c = json.load(open(sys.argv[1]))['calibration']
assert c['nodes'] == 1 and c['cpu_adam_node']['processes_per_node'] == 4, c['cpu_adam_node']
assert {x['pair'] for x in c['collectives'] if x['op'] == 'send_recv'} == {'same_node'}
" "$TMP/cpu4one.json" || fails=$((fails+1))
  # A node number that is not one: refused on every rank.
  expect_exit_nonzero() { "$@" >"$TMP/out" 2>"$TMP/err"; [ $? -ne 0 ] || { echo "FAIL: $* exited 0"; fails=$((fails+1)); }; }
  PLANNER_NODE=x expect_exit_nonzero "${MPI[@]}" -x PLANNER_NODE $P calibrate --device cpu --quick -q -o "$TMP/bad.json"
  expect_grep "PLANNER_NODE='x' is not a node number" "$TMP/err"
  grep -q "exit code: *2\|Exit code: *2" "$TMP/err" || { echo "FAIL: a bad PLANNER_NODE should exit 2"; fails=$((fails+1)); }
fi

# Memory at the edge: a plan predicted not to fit warns before it runs, and says so in result.json.
python3 - "$PLAN" "$TMP/small.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["cluster"]["gpu"]["memory_bytes"] = 4 << 20     # 4 MiB: the tiny model needs about 6
json.dump(p, open(sys.argv[2], "w"))
PY
expect_exit 0 $P exec "$TMP/small.json" --device cpu --steps 1 --warmup 0 -o "$TMP/r.json"
expect_grep "warning: the plan is predicted not to fit" "$TMP/err"
[ "$(grep -c 'predicted not to fit' "$TMP/err")" = 1 ] || { echo "FAIL: warned more than once"; fails=$((fails+1)); }
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['predicted_fit'] is False and r['prediction']['fits'] is False" "$TMP/r.json" || fails=$((fails+1))
expect_exit 0 $P exec "$PLAN" --device cpu --steps 1 --warmup 0 -q -o "$TMP/r2.json"
python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['predicted_fit'] is True" "$TMP/r2.json" || fails=$((fails+1))
if grep -q "predicted not to fit" "$TMP/err"; then echo "FAIL: warned on a plan that fits"; fails=$((fails+1)); fi
finish
