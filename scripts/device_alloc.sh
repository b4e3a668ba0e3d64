#!/usr/bin/env bash
# Device experiment (issue 10's remaining memory miss): how much memory the
# caching allocator reserves beyond what tensors use, with its default
# settings and with expandable segments (PYTORCH_CUDA_ALLOC_CONF=
# expandable_segments:True), on the plans where the miss shows (TinyLlama with
# full checkpointing, one GPU and two) and on two that predict well; then one
# interleaved pipeline run with NCCL_DEBUG=INFO (its communication buffers are
# the other memory miss). Run from the repository root on nvidia-h200-x2:
#   OUT=/some/dir bash scripts/device_alloc.sh
# Results: $OUT/results.tgz (exec results, logs, summary.txt).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
R=$OUT/r
mkdir -p "$R"
exec > >(tee -a "$R/log.txt") 2>&1
START=$(date +%s)
say() { echo "== $* ($(( $(date +%s) - START )) s)"; }
pack() { tar czf "$OUT/results.tgz" -C "$R" . 2>/dev/null; }
trap pack EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
if [ ! -x build-dev/planner ]; then
  say build
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$SP/torch/share/cmake" -DNCCL_ROOT="$SP/nvidia/nccl" >"$R/build.log" 2>&1 || { tail -30 "$R/build.log"; exit 1; }
fi
cmake --build build-dev --target planner planner-exec >>"$R/build.log" 2>&1 || { grep -E "error" "$R/build.log" | head -30; exit 1; }
say built
X=./build-dev/planner
P=validation/h200x2/heldout-a/validate/plans
$X predict --model examples/models/tinyllama-1.1b.json --gpus 1xH200 --strategy mbs=16,gas=1,ckpt=full,precision=bf16 \
  --seq 2048 --global-batch 16 -o "$R/tinyllama-1gpu-full.json" >/dev/null
cp "$P/tinyllama-dp2-z1-fp16-full.json" "$P/neo-1.3b-dp2-z0.json" "$P/opt-1.3b-tp2.json" "$R/"
for n in tinyllama-1gpu-full tinyllama-dp2-z1-fp16-full neo-1.3b-dp2-z0 opt-1.3b-tp2; do
  for mode in default expandable; do
    envs=()
    [ "$mode" = expandable ] && envs+=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
    case $n in *1gpu*) envs+=(CUDA_VISIBLE_DEVICES=0) ;; esac
    say "exec $n ($mode)"
    env "${envs[@]}" timeout 200 $X exec "$R/$n.json" --steps 5 --warmup 2 -q -o "$R/$n.$mode.exec.json" 2>&1 | tail -3
  done
done
say "interleaved pipeline with NCCL_DEBUG=INFO"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ALLOC,P2P timeout 200 $X exec "$P/tinyllama-pp2-interleaved.json" --steps 2 --warmup 1 -q \
  -o "$R/tinyllama-pp2-interleaved.nccl.exec.json" >"$R/interleaved-nccl.log" 2>&1
grep -ciE "alloc" "$R/interleaved-nccl.log"
python3 - "$R" <<'PY' | tee "$R/summary.txt"
import glob, json, os, sys
G = 2**30
print(f"{'run':45s} {'step s':>8s} {'peak GiB':>9s} {'alloc peak':>10s} {'reserved-unalloc':>16s} {'outside':>8s} {'overhead':>8s}")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.exec.json"))):
    m = json.load(open(f))["measurement"]; mm = m["memory"]
    print(f"{os.path.basename(f)[:-10]:45s} {m['step_seconds']['median']:8.4f} {mm['total_bytes']/G:9.2f} "
          f"{mm['phases']['peak_step_allocated']/G:10.2f} {mm['overhead_parts']['reserved_unallocated']/G:16.2f} "
          f"{mm['overhead_parts']['outside_allocator']/G:8.2f} {mm['categories']['overhead']/G:8.2f}")
PY
say done
