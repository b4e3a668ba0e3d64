# Sourced by the small device experiments (scripts/device_x2_neighbor.sh,
# device_x2_traces.sh, device_step_gemms.sh): multicast off, $OUT/r as the
# results folder (its log.txt holds everything printed; results.tgz packed
# at exit), and build_target TARGET: the Release build into build-dev against
# the device's pip LibTorch and NCCL (log in $R/build.log; exit 1 on failure).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -n "${OUT:-}" ] || { echo "$(basename "$0"): set OUT to the folder to write into" >&2; exit 2; }
R=$OUT/r
mkdir -p "$R"
trap 'tar czf "$OUT/results.tgz" -C "$R" .' EXIT
exec > >(tee -a "$R/log.txt") 2>&1
START=$(date +%s)
build_target() {
  local sp
  sp=$(python3 -c 'import site;print(site.getsitepackages()[0])')
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$sp/torch/share/cmake" -DNCCL_ROOT="$sp/nvidia/nccl" >"$R/build.log" 2>&1 &&
    cmake --build build-dev --target "$1" -j "$(nproc)" >>"$R/build.log" 2>&1 ||
    { grep -E "error" "$R/build.log" | head -30; exit 1; }
  echo "built $1 in $(( $(date +%s) - START )) s"
}
