#!/usr/bin/env bash
# Several nodes emulated on one host (scripts/emulate_nodes.sh, issue 30): a
# dp=2 x tp=2 plan of the tiny model run under mpirun -np 4 as two "nodes" of
# two ranks, the node from the environment (PLANNER_NODE), trains exactly as
# the same four ranks on one node (the same losses, bit for bit: the groups
# and the arithmetic are the same, only where each rank thinks it runs moves).
# The wrapper refuses bad use with exit 2.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
if [ "${PLANNER_HAS_RUNTIME:-OFF}" != ON ]; then echo "runtime not built: skipped"; finish; exit $?; fi
command -v mpirun >/dev/null || { echo "mpirun missing: skipped"; finish; exit $?; }
MPI=(mpirun -np 4 --oversubscribe); [ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
EMU="$ROOT/scripts/emulate_nodes.sh"
python3 - "$ROOT/examples/plans/tiny-cpu-tp2-sp.json" "$TMP/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
s = p["strategy"]
s["dp"], s["gas"] = 2, 1
s.pop("text", None)
p["global_batch"] = s["dp"] * s["mbs"] * s["gas"]
p["cluster"].update({"nodes": 2, "gpus_per_node": 2, "name": "2x2xH100"})
json.dump(p, open(sys.argv[2], "w"))
PY
expect_exit 0 "${MPI[@]}" bash "$EMU" 2 $P exec "$TMP/plan.json" --device cpu --steps 2 --warmup 1 -q -o "$TMP/two.json"
expect_exit 0 "${MPI[@]}" $P exec "$TMP/plan.json" --device cpu --steps 2 --warmup 1 -q -o "$TMP/one.json"
python3 - "$TMP/two.json" "$TMP/one.json" <<'PY' || fails=$((fails+1))
import json, sys
two, one = (json.load(open(f))["measurement"] for f in sys.argv[1:])
assert two["world"] == 4 and len(two["ranks"]) == 4, two["ranks"]
assert two["losses"] == one["losses"], (two["losses"], one["losses"])
PY
# Each rank's environment as the wrapper sets it.
expect_exit 0 "${MPI[@]}" bash "$EMU" 2 bash -c 'echo "$OMPI_COMM_WORLD_RANK $PLANNER_NODE $CUDA_VISIBLE_DEVICES $NCCL_HOSTID"'
for want in "0 0 0,1 planner-emulated-node-0" "1 0 0,1 planner-emulated-node-0" "2 1 2,3 planner-emulated-node-1" \
            "3 1 2,3 planner-emulated-node-1"; do
  expect_grep "^$want$" "$TMP/out"
done
# Bad use: exit 2, one line.
expect_bad_input bash "$EMU" 2 true && expect_grep "not started by mpirun" "$TMP/err"
OMPI_COMM_WORLD_RANK=0 expect_bad_input bash "$EMU" two true && expect_grep "not a number of ranks" "$TMP/err"
finish
