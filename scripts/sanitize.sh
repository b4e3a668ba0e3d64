#!/usr/bin/env bash
# Builds the planning half (strategies, specs, costmodel, planner; no LibTorch) with
# AddressSanitizer + UndefinedBehaviorSanitizer into ./build-asan and runs the
# whole CTest suite there. No suppression file: a leak or a UB report fails.
# The runtime is left out because LibTorch is not built with the sanitizers
# (its own allocations would be reported as ours). Needs scripts/setup.sh's
# packages; takes about 10-15 minutes on 2 cores (-O1 -g).
set -euo pipefail
cd "$(dirname "$0")/.."
flags="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-asan -G Ninja -DPLANNER_WITH_TORCH=OFF -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-asan -j"${JOBS:-2}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# The CLI tests' time limits (tests/cli/hardening.sh) are for an optimized build.
export PLANNER_TIME_FACTOR=10
ctest --test-dir build-asan --output-on-failure
