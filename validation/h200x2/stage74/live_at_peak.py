#!/usr/bin/env python3
"""What is live at the allocated peak of a PLANNER_ALLOC_TRACE record
(runtime/README.md), after the warm-up step: the allocations made since that
step's start, counted by size, and the last allocations and frees of 16 MiB
or more around the peak ('+' allocated, '-' freed, '*' the peak's own).

    python3 live_at_peak.py trace.csv[.gz]
"""
import csv
import gzip
import sys
from collections import Counter

MIB, GIB = 2.0 ** 20, 2.0 ** 30
MARKS = {(1000 + t) * 512: t for t in range(3)}  # exec's markers; tag 0: a step's start


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [(r["action"], int(r["addr"]), int(r["size"])) for r in csv.DictReader(f)]


def peak_of(rows):
    """(peak bytes, event index, index of that step's start marker), steps after the first."""
    live, allocated, step, start, best = {}, 0, -1, 0, (0, 0, 0)
    for i, (act, addr, size) in enumerate(rows):
        if act == "alloc":
            if MARKS.get(size) == 0:
                step, start = step + 1, i
            live[addr] = size
            allocated += size
            if step >= 1 and allocated > best[0]:
                best = (allocated, i, start)
        elif act == "free_requested" and addr in live:
            allocated -= live.pop(addr)
    return best


def main(path):
    rows = read(path)
    peak, at, start = peak_of(rows)
    live, born = {}, {}
    for i, (act, addr, size) in enumerate(rows[: at + 1]):
        if act == "alloc":
            live[addr], born[addr] = size, i
        elif act == "free_requested" and addr in live:
            del live[addr]
    made = Counter(live[a] for a in live if born[a] > start)
    print(f"allocated peak {peak / GIB:.3f} GiB at event {at}, {at - start} events after its step's start")
    print(f"live allocations made in that step: {sum(made.values())}, {sum(s * n for s, n in made.items()) / GIB:.3f} GiB")
    for size, n in sorted(made.items(), key=lambda x: -x[0] * x[1])[:12]:
        print(f"  {size / MIB:9.1f} MiB x {n:4d} = {size * n / GIB:7.3f} GiB")
    around = [("+" if act == "alloc" else "-") + f"{size / MIB:.0f}" + ("*" if i == at else "")
              for i, (act, addr, size) in enumerate(rows[max(0, at - 40): at + 20], start=max(0, at - 40))
              if size >= 16 * MIB and act != "free_completed"]
    print("around the peak (MiB):", " ".join(around))


if __name__ == "__main__":
    main(sys.argv[1])
