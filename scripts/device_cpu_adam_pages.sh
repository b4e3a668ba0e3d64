#!/usr/bin/env bash
# One device call: the host's CPU and memory settings, then
# benchmarks/cpu_adam_pages.py (the offload CPU AdamW's rate by how its host
# buffers are allocated) and benchmarks/cpu_adam_threads.py (by thread count,
# beside a spinning process, two processes). Writes $OUT/pages.json,
# $OUT/threads.json and $OUT/log.txt.
#   OUT=/some/dir bash scripts/device_cpu_adam_pages.sh
set -uo pipefail
[ -n "${OUT:-}" ] || { echo "device_cpu_adam_pages.sh: set OUT to the folder to write into" >&2; exit 2; }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc; lscpu | grep -E "Model name|Socket|NUMA|Thread|Core|L3|Hypervisor" || true
  grep -E "MemTotal|MemAvailable|AnonHugePages|Hugepagesize" /proc/meminfo
  cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag 2>&1
  timeout 200 python3 benchmarks/cpu_adam_pages.py --json "$OUT/pages.json"
  echo "rc $?"
  timeout 150 python3 benchmarks/cpu_adam_threads.py --json "$OUT/threads.json"
  echo "rc $?"
} > "$OUT/log.txt" 2>&1
cat "$OUT/log.txt"
