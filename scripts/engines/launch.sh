#!/usr/bin/env bash
# One exported plan, launched with its engine's own launcher, as it is written:
#
#   bash scripts/engines/launch.sh NAME PLAN.json deepspeed|megatron|fsdp [PROFILE]
#
# 1. the predictions first: `planner predict --engine E --json` and
#    `planner memory --engine E --json` (with PROFILE when given);
# 2. `planner export PLAN --to E -o $R/engines/NAME.<cfg> --json` (config and launch line);
# 3. the export's launch line, run unmodified from the repository root, with
#    PLANNER_ENGINE_RESULT=$R/engines/NAME.result.json (the trainer's
#    ENGINE_RESULT line: step times, peak allocated bytes) and
#    PLANNER_ENGINE_STEPS/WARMUP from the environment (default 10/3);
# 4. a one-line comparison: measured median step and peak beside the predictions.
# $X is the planner binary (default ./build-dev/planner), $R the results folder.
# Wheels installed with pip --target /tmp/site (README: validation/engines/)
# are put on PYTHONPATH and PATH. Multicast stays off.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: scripts/engines/launch.sh NAME PLAN.json deepspeed|megatron|fsdp [PROFILE]" >&2; exit 2; }
name=$1 plan=$2 engine=$3 profile=${4:-}
X=${X:-./build-dev/planner}
R=${R:-$PWD/engine-results}
case $engine in
  deepspeed) ext=json ;;
  megatron) ext=txt ;;
  fsdp) ext=json ;;
  *) echo "launch.sh: engine must be deepspeed, megatron or fsdp (got '$engine')" >&2; exit 2 ;;
esac
[ -f "$plan" ] || { echo "launch.sh: no plan file $plan" >&2; exit 2; }
if [ -d /tmp/site ]; then
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
E=$R/engines
mkdir -p "$E"
prof=()
[ -n "$profile" ] && prof=(--profile "$profile")
"$X" predict --plan "$plan" --engine "$engine" "${prof[@]}" --json >"$E/$name.predict.json" || echo "launch.sh: predict failed"
"$X" memory --plan "$plan" --engine "$engine" "${prof[@]}" --json >"$E/$name.memory.json" || echo "launch.sh: memory failed"
"$X" export "$plan" --to "$engine" -o "$E/$name.$ext" --json >"$E/$name.export.json" || { echo "launch.sh: export failed"; exit 1; }
launch=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["launch"])' "$E/$name.export.json")
echo "launch: $launch"
start=$(date +%s)
PLANNER_ENGINE_RESULT="$E/$name.result.json" bash -c "$launch"
rc=$?
echo "launch.sh: $name exit $rc after $(( $(date +%s) - start )) s"
python3 - "$E" "$name" <<'PY' || true
import json, sys, os
E, n = sys.argv[1], sys.argv[2]
def get(f):
    try:
        return json.load(open(os.path.join(E, f)))
    except (OSError, ValueError):
        return None
res, pred, mem = get(n + ".result.json"), get(n + ".predict.json"), get(n + ".memory.json")
def find(j, *keys):
    """The first number under any of these keys, searched depth-first (the reports' layouts differ)."""
    if isinstance(j, dict):
        for k in keys:
            if isinstance(j.get(k), (int, float)):
                return j[k]
        for v in j.values():
            x = find(v, *keys)
            if x is not None:
                return x
    if isinstance(j, list):
        for v in j:
            x = find(v, *keys)
            if x is not None:
                return x
    return None
ps = find(pred, "step_seconds")
pm = find(mem, "per_gpu_peak_bytes")
# The engine's own step (predict --engine X: "engine_step"); predicted_step_s stays this runtime's.
pe = (pred or {}).get("engine_step", {}).get("step_seconds")
line = {"name": n, "measured_step_s": res and res.get("median_step_s"), "predicted_step_s": ps,
        "predicted_engine_step_s": pe,
        "measured_peak_bytes": res and res.get("peak_allocated_bytes"), "predicted_peak_bytes": pm}
print("COMPARE " + json.dumps(line))
PY
exit $rc
