#!/usr/bin/env bash
# Installs every dependency (idempotently) and builds planner into ./build.
#   scripts/setup.sh            # with the LibTorch runtime (planner exec)
#   scripts/setup.sh --no-torch # planning only: strategies, specs, costmodel, planner
#   scripts/setup.sh --fuzz     # also clang with libFuzzer, for scripts/fuzz.sh
# Debian/Ubuntu: OpenMPI, Eigen, Boost.Graph, CLI11, Catch2, nlohmann-json, fmt
# from the distribution, gnuplot-nox for planner validate's pictures; LibTorch
# from the `torch` wheel (CPU build 2.13.0 here).
set -euo pipefail
cd "$(dirname "$0")/.."
with_torch=1
build_type=Release
fuzz=0
for a in "$@"; do
  case "$a" in
    --no-torch) with_torch=0 ;;
    --debug) build_type=Debug ;;
    --fuzz) fuzz=1 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done

say() { echo "[setup] $*" >&2; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

pkgs="g++ make libopenmpi-dev openmpi-bin libeigen3-dev libboost-graph-dev libcli11-dev catch2 nlohmann-json3-dev libfmt-dev gnuplot-nox"
[ "$fuzz" = 1 ] && pkgs="$pkgs clang"   # Debian's clang brings libFuzzer (libclang-rt-*-dev)
command -v cmake >/dev/null || pkgs="$pkgs cmake"
command -v ninja >/dev/null || pkgs="$pkgs ninja-build"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  say "installing:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

prefix=""
if [ "$with_torch" = 1 ]; then
  py=$(command -v python3 || true)
  if [ -z "$py" ]; then say "python3 not found: building without the runtime"; with_torch=0; fi
fi
if [ "$with_torch" = 1 ]; then
  if ! python3 -c 'import torch' >/dev/null 2>&1; then
    say "installing torch 2.13.0 (LibTorch for the runtime)"
    python3 -m pip install -q torch==2.13.0 || { say "torch 2.13.0 unavailable; trying any CPU torch"; python3 -m pip install -q torch; }
  fi
  prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
fi

gen=""; command -v ninja >/dev/null && gen="-G Ninja"
say "configuring ($build_type, runtime: $([ $with_torch = 1 ] && echo on || echo off))"
cmake -S . -B build $gen -DCMAKE_BUILD_TYPE=$build_type \
  -DPLANNER_WITH_TORCH=$([ $with_torch = 1 ] && echo ON || echo OFF) \
  ${prefix:+-DCMAKE_PREFIX_PATH=$prefix} >/dev/null
say "building (first build with LibTorch takes a few minutes on 2 cores)"
cmake --build build -j "$(nproc)"
say "done: ./build/planner --help"
