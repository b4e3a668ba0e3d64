#!/usr/bin/env bash
# Whole-process wall time of a planning command over repeated runs (issue 13,
# "planning starts fast"): the median and the spread of N runs of
#   planner plan --model llama-2-70b --gpus 128x8xH100 --seq 4096 --global-batch 1024
# Usage: benchmarks/startup.sh [path/to/planner] [N]   (default ./build/planner, 20)
set -euo pipefail
P=${1:-./build/planner}
N=${2:-20}
python3 - "$P" "$N" <<'PY'
import statistics, subprocess, sys, time
p, n = sys.argv[1], int(sys.argv[2])
cmd = [p, "plan", "--model", "llama-2-70b", "--gpus", "128x8xH100", "--seq", "4096", "--global-batch", "1024"]
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)  # warm the file cache
t = []
for _ in range(n):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    t.append(time.perf_counter() - t0)
print(f"{' '.join(cmd[1:])}: {n} runs, median {statistics.median(t) * 1e3:.1f} ms "
      f"(min {min(t) * 1e3:.1f}, max {max(t) * 1e3:.1f})")
PY
