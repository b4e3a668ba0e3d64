#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (one per parser) with clang and
# -fsanitize=fuzzer,address,undefined into ./build-fuzz, then runs each.
#   scripts/fuzz.sh --smoke               # each target ~20 s (CI, .ci/run)
#   scripts/fuzz.sh --seconds 600         # the long run, each target 600 s
#   scripts/fuzz.sh --seconds 60 plan     # only some targets (names as in tests/fuzz/corpus/)
#   scripts/fuzz.sh --build-only
# Every target gets the dictionary tests/fuzz/nesting.dict (JSON nesting).
# Each target starts from its seed corpus tests/fuzz/corpus/<target>/ (read
# only) and grows a working corpus in build-fuzz/corpus/<target>/. A crash, an
# exception other than InputError, a sanitizer report, a hang (-timeout) or a
# memory blow-up (-rss_limit_mb) stops that target, leaves the input in
# build-fuzz/artifacts/<target>/ and makes the script exit 1 after the rest
# ran. libFuzzer's log of each run: build-fuzz/logs/<target>.log; the last
# line per target printed here has its executions and coverage (cov).
# Needs clang with libFuzzer (scripts/setup.sh --fuzz installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=20
build_only=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) seconds=20 ;;
    --seconds) seconds="${2:?--seconds needs a number}"; shift ;;
    --build-only) build_only=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: --seconds wants a whole number, got '$seconds'" >&2; exit 2 ;; esac

cxx="${FUZZ_CXX:-$(command -v clang++ || true)}"
if [ -z "$cxx" ]; then
  echo "fuzz.sh: clang++ not found (libFuzzer needs clang): run scripts/setup.sh --fuzz" >&2
  exit 2
fi
# -O1 and line tables only: fast enough to fuzz, quick to build on 2 cores,
# symbolized stacks in the reports.
flags="-O1 -gline-tables-only -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Debug \
  -DPLANNER_WITH_TORCH=OFF -DPLANNER_BUILD_TESTS=OFF -DPLANNER_BUILD_FUZZ=ON \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-fuzz --target fuzz_targets -j"${JOBS:-2}"
[ "$build_only" = 1 ] && exit 0

if [ ${#targets[@]} = 0 ]; then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
failed=()
for t in "${targets[@]}"; do
  bin="build-fuzz/tests/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz.sh: no target '$t' (targets: $(ls tests/fuzz/corpus | tr '\n' ' '))" >&2; exit 2; }
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/artifacts/$t" build-fuzz/logs
  log="build-fuzz/logs/$t.log"
  # -timeout: one input may take at most 10 s (the planner's bound is a few);
  # -rss_limit_mb: a few hundred MB of the planner's own, plus ASan's shadow.
  # -dict: JSON nesting tokens (tests/fuzz/nesting.dict), so mutations reach
  # the depth limit and beyond (issue 29: a value nested 150,000 deep crashed).
  if "$bin" "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" -max_total_time="$seconds" -timeout=10 \
       -dict=tests/fuzz/nesting.dict \
       -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$t/" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  echo "fuzz $t: $status, ${execs:-?} executions, cov ${cov:-?} (${seconds} s; log $log)"
done
if [ ${#failed[@]} -gt 0 ]; then
  for t in "${failed[@]}"; do
    echo "--- $t: $(ls build-fuzz/artifacts/$t | head -3 | tr '\n' ' ')" >&2
    grep -m8 -E "terminate called|what\(\)|runtime error|FINDING|ERROR: |SUMMARY" "build-fuzz/logs/$t.log" >&2 ||
      tail -20 "build-fuzz/logs/$t.log" >&2
  done
  echo "fuzz.sh: findings in: ${failed[*]} (inputs in build-fuzz/artifacts/; reproduce with build-fuzz/tests/fuzz/fuzz_<target> <file>)" >&2
  exit 1
fi
