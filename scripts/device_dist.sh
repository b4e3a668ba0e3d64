#!/usr/bin/env bash
# Device experiment for the data-parallel / ZeRO / offload runtime (issue 8),
# one call on the nvidia-h200-x2 machine (2 H200s, NVLink):
#   OUT=/some/dir PART=dp bash scripts/device_dist.sh       # DP/ZeRO on 2 GPUs + references
#   OUT=/some/dir PART=offload bash scripts/device_dist.sh  # opt-6.7b ZeRO-3 + CPU offload on 1 GPU
# PART=dp:
#   - builds planner and dist_tests (LibTorch 2.11 + CUDA 13, pip's NCCL);
#   - dist_tests under mpirun -np 2 (the communicator on NCCL and MPI, the CPU
#     equivalence tests);
#   - gpt-neo-1.3b (24 layers, hidden 2048, seq 2048, mbs 8, gas 4, bf16): one
#     GPU, then dp=2 with ZeRO-0/1/2/3 (planner exec starts the two ranks), then
#     PyTorch DDP and FSDP2 (reshard after forward on = ZeRO-3-like, off =
#     ZeRO-2-like) on the same model, batch and GPUs
#     (benchmarks/pytorch_dist_reference.py);
#   - bf16 equivalence: one GPU with gas 8 = the same global batch as dp=2 gas 4;
#     the runs' losses are compared step by step.
# PART=offload: the plan `planner plan --model opt-6.7b --gpus 1xH100
#   --host-memory 128GiB` picks (zero=3, offload=optimizer), run on one H200, and
#   the same strategy planned for the H200.
# Results: $OUT/*.exec.json (docs/RESULT.md), $OUT/*.ref.json, $OUT/log.txt,
# $OUT/summary.txt. Copy them to validation/h200x2/.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/out-dist}
PART=${PART:-dp}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
mkdir -p "$OUT"
LOG="$OUT/log-$PART.txt"
: >"$LOG"
say() { echo "== $*" | tee -a "$LOG"; }
D=examples/plans/h200x2

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee -a "$LOG"
nvidia-smi topo -m 2>&1 | tee -a "$LOG"
nproc | tee -a "$LOG"
SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
say "build"
t0=$(date +%s)
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS=ON \
  -DCMAKE_PREFIX_PATH="$SP/torch/share/cmake" -DNCCL_ROOT="$SP/nvidia/nccl" >>"$LOG" 2>&1 || { tail -30 "$LOG"; exit 1; }
targets=planner
[ "$PART" = dp ] && [ "${TESTS:-1}" = 1 ] && targets="planner dist_tests"
cmake --build build-dev --target $targets >>"$LOG" 2>&1 || { grep -E "error|Error" "$LOG" | head -40; exit 1; }
say "built in $(( $(date +%s) - t0 )) s"
grep -E "NCCL|nccl" build-dev/CMakeCache.txt | grep -iE "PLANNER_HAS_NCCL|NCCL_INCLUDE|NCCL_LIB" | tee -a "$LOG"
X=./build-dev/planner
run() {  # run NAME PLAN [extra env...]: planner exec with the result under $OUT
  local n=$1 p=$2; shift 2
  say "planner exec $p"
  env "$@" timeout 300 $X exec "$p" --steps "$STEPS" --warmup "$WARMUP" -o "$OUT/$n.exec.json" 2>&1 | grep -v "warm-up step" | tee -a "$LOG"
}

if [ "$PART" = dp ]; then
  [ "${TESTS:-1}" = 1 ] && say "dist_tests (mpirun -np 2)" && \
  timeout 240 mpirun --allow-run-as-root -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
    -x NVSHMEM_DISABLE_NVLS ./build-dev/tests/dist_tests 2>&1 | tail -15 | tee -a "$LOG"
  run neo-dp1 $D/neo1.3b-dp1.json CUDA_VISIBLE_DEVICES=0
  for z in ${ZEROS:-0 1 2 3}; do run neo-dp2-zero$z $D/neo1.3b-dp2-zero$z.json; done
  REF=benchmarks/pytorch_dist_reference.py
  if [ "${REFS:-1}" = 1 ]; then
  say "PyTorch DDP"
  timeout 240 torchrun --nproc_per_node 2 $REF $D/neo1.3b-dp2-zero0.json --mode ddp --steps "$STEPS" --warmup "$WARMUP" \
    -o "$OUT/ddp.ref.json" 2>&1 | grep -vE "warm-up|^W[0-9]|OMP_NUM" | tail -4 | tee -a "$LOG"
  for r in 0 1; do
    say "PyTorch FSDP2 reshard_after_forward=$r"
    timeout 240 torchrun --nproc_per_node 2 $REF $D/neo1.3b-dp2-zero0.json --mode fsdp2 --reshard-after-forward $r \
      --steps "$STEPS" --warmup "$WARMUP" -o "$OUT/fsdp2-r$r.ref.json" 2>&1 | grep -vE "warm-up|^W[0-9]|OMP_NUM" | tail -4 | tee -a "$LOG"
  done
  fi
  [ "${GAS8:-1}" = 1 ] && run neo-dp1-gas8 $D/neo1.3b-dp1-gas8.json CUDA_VISIBLE_DEVICES=0
fi
if [ "$PART" = offload ] || [ "${OFFLOAD:-0}" = 1 ]; then
  free -g | tee -a "$LOG"
  STEPS=3 WARMUP=1
  run opt6.7b-offload-h100plan $D/opt6.7b-offload-h100.json CUDA_VISIBLE_DEVICES=0
  [ "${H200PLAN:-1}" = 1 ] && run opt6.7b-offload-h200 $D/opt6.7b-offload-h200.json CUDA_VISIBLE_DEVICES=0
fi

say "summary"
python3 scripts/dist_summary.py "$OUT" 2>&1 | tee "$OUT/summary-$PART.txt" | tee -a "$LOG"
# At most 8 files come back from the device tool: the JSON results travel as one archive.
(cd "$OUT" && tar -czf "results-$PART.tgz" *.json && rm -f *.json)
