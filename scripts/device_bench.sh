#!/usr/bin/env bash
# Device benchmark for `planner exec` (runtime/) against the PyTorch eager
# reference (benchmarks/pytorch_reference.py), side by side on one GPU.
#
# Run from the repository root on a machine with a GPU (the device recipe in
# DESIGN.md; PyTorch 2.11 + CUDA 13 there):
#   OUT=/some/dir bash scripts/device_bench.sh
# Optional: PLANS="examples/plans/a.json ..." (exec + reference), EXTRA="..."
# (exec only: the checkpointing and fp16 variants), STEPS=10 WARMUP=3 PROFILE=1.
# Writes under $OUT (at most 8 files come back from the device tool): log.txt,
# NAME.exec.json (planner exec result, docs/RESULT.md), NAME.ref.json (the
# reference's numbers), profile.txt (one profiled reference step of the last
# plan, when PROFILE=1).
# Copy the returned files to validation/<gpu>/ (e.g. validation/h100/).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/out-bench}
mkdir -p "$OUT"
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
PLANS=${PLANS:-"examples/plans/gpt2-xl-h100-bf16.json examples/plans/gpt-neo-1.3b-h100-bf16.json"}
EXTRA=${EXTRA-"examples/plans/gpt-neo-1.3b-h100-bf16-ckpt-full.json examples/plans/gpt2-xl-h100-fp16-selective.json"}
LOG="$OUT/log.txt"
: >"$LOG"
say() { echo "== $*" | tee -a "$LOG"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1 | tee -a "$LOG"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tee -a "$LOG"

SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
say "build"
t0=$(date +%s)
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$SP/torch/share/cmake" -DNCCL_ROOT="$SP/nvidia/nccl" >>"$LOG" 2>&1 || { tail -30 "$LOG"; exit 1; }
cmake --build build-dev --target planner >>"$LOG" 2>&1 || { grep -E "error|Error" "$LOG" | head -40; exit 1; }
say "built in $(( $(date +%s) - t0 )) s"

for p in $PLANS; do
  n=$(basename "$p" .json)
  say "planner exec $p"
  ./build-dev/planner exec "$p" --steps "$STEPS" --warmup "$WARMUP" -o "$OUT/$n.exec.json" 2>&1 | tee -a "$LOG"
  say "pytorch reference $p"
  prof=()
  if [ "${PROFILE:-0}" = 1 ] && [ "$p" = "${PLANS##* }" ]; then prof=(--profile "$OUT/profile.txt"); fi
  python3 benchmarks/pytorch_reference.py "$p" --steps "$STEPS" --warmup "$WARMUP" -o "$OUT/$n.ref.json" \
    "${prof[@]}" 2>&1 | grep -v "warm-up step" | tee -a "$LOG"
done

for p in $EXTRA; do
  n=$(basename "$p" .json)
  say "planner exec $p"
  ./build-dev/planner exec "$p" --steps "$STEPS" --warmup "$WARMUP" -o "$OUT/$n.exec.json" 2>&1 | tee -a "$LOG"
done

say "summary"
python3 - "$OUT" $PLANS $EXTRA <<'PY' | tee -a "$LOG"
import json, os, sys
out = sys.argv[1]
for p in sys.argv[2:]:
    n = os.path.basename(p)[:-5]
    try:
        e = json.load(open(f"{out}/{n}.exec.json"))
    except Exception as ex:
        print(n, "missing:", ex); continue
    try:
        r = json.load(open(f"{out}/{n}.ref.json"))
    except Exception:
        r = None
    m = e["measurement"]; c = m["memory"]["categories"]
    line = (f"{n}: C++ {m['step_seconds']['median']:.4f} s ({m['step_seconds']['min']:.4f}-{m['step_seconds']['max']:.4f}) "
            f"{m['tokens_per_second']:.0f} tok/s {m['model_tflops']:.1f} TFLOP/s MFU {100*(m['mfu'] or 0):.1f}%")
    if r:
        line += (f" | PyTorch {r['step_seconds']['median']:.4f} s {r['tokens_per_second']:.0f} tok/s MFU {100*(r['mfu'] or 0):.1f}%"
                 f" | PyTorch time / C++ time {r['step_seconds']['median']/m['step_seconds']['median']:.3f}")
    print(line)
    G = 2**30
    print("   memory GiB measured: " + ", ".join(f"{k} {v/G:.2f}" for k, v in c.items()) + f", total {m['memory']['total_bytes']/G:.2f}")
    cmp = e["comparison"]
    print("   predicted:           " + ", ".join(f"{k[7:]} {(cmp[k]['predicted'] or 0)/G:.2f}" for k in cmp if k.startswith("memory.")))
    print(f"   loss C++ {m['losses'][0]:.4f} -> {m['losses'][-1]:.4f}" +
          (f"; PyTorch {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, peak allocated {(r['peak_allocated_bytes'] or 0)/G:.2f} GiB" if r else "") +
          f"; skipped steps {m['skipped_steps']}")
PY
