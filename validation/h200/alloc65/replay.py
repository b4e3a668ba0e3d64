#!/usr/bin/env python3
"""Replays a PLANNER_ALLOC_TRACE file (runtime/README.md): the CUDA caching
allocator's allocations, frees and segment mappings in order, with exec's
markers ((1000 + tag) x 512-byte blocks: tag 0 a step's start, 1 the head,
2 the end of the backward). Prints where the allocated bytes peak, every time
the reserved bytes grow (what was asked for, what was allocated, and the free
holes inside the reserved range then), and the reserved bytes the allocated
peak leaves unused.

    python3 replay.py trace.csv
"""
import bisect
import csv
import sys

GIB = 2.0 ** 30
MARK = {(1000 + t) * 512: t for t in range(3)}
NAMES = {0: "step start", 1: "head", 2: "backward end"}


def holes(mapped, live):
    """Free ranges inside the mapped ranges: (size, addr), largest first."""
    out = []
    starts = sorted(live)
    for base, size in mapped:
        cur = base
        i = bisect.bisect_left(starts, base)
        while i < len(starts) and starts[i] < base + size:
            a = starts[i]
            if a > cur:
                out.append((a - cur, cur))
            cur = max(cur, a + live[a])
            i += 1
        if base + size > cur:
            out.append((base + size - cur, cur))
    return sorted(out, reverse=True)


def merge(ranges):
    ranges = sorted(ranges)
    out = []
    for a, n in ranges:
        if out and out[-1][0] + out[-1][1] >= a:
            out[-1] = (out[-1][0], max(out[-1][0] + out[-1][1], a + n) - out[-1][0])
        else:
            out.append((a, n))
    return out


def main(path):
    rows = list(csv.DictReader(open(path)))
    live, mapped = {}, []
    allocated = reserved = 0
    step, phase = -1, "before the first step"
    peak = (0, None)
    grows = []
    pending_map = []
    for i, r in enumerate(rows):
        act, addr, size = r["action"], int(r["addr"]), int(r["size"])
        if act == "alloc":
            if size in MARK:
                t = MARK[size]
                if t == 0:
                    step += 1
                phase = f"step {step}, after {NAMES[t]}"
            live[addr] = size
            allocated += size
            for m, res, hs in pending_map:
                grows.append((phase, m, size, allocated - size, res, hs[:4]))
            pending_map = []
            if allocated > peak[0]:
                peak = (allocated, phase, reserved)
        elif act == "free_completed":
            allocated -= live.pop(addr, 0)
        elif act in ("segment_map", "segment_alloc"):
            pending_map.append((size, reserved, holes(mapped, live)))
            mapped = merge(mapped + [(addr, size)])
            reserved += size
        elif act in ("segment_unmap", "segment_free"):
            reserved -= size
            # drop the range from `mapped`
            new = []
            for a, n in mapped:
                lo, hi = max(a, addr), min(a + n, addr + size)
                if lo >= hi:
                    new.append((a, n))
                    continue
                if a < lo:
                    new.append((a, lo - a))
                if hi < a + n:
                    new.append((hi, a + n - hi))
            mapped = new
    print(f"{len(rows)} events, {step + 1} steps marked")
    print(f"allocated peak {peak[0] / GIB:.2f} GiB at {peak[1]}, reserved then {peak[2] / GIB:.2f} GiB; "
          f"reserved at the end {reserved / GIB:.2f} GiB")
    print("reserved grows (phase: mapped, for a request of, allocated before it, reserved before the map; "
          "the largest free holes then):")
    for phase, m, req, alloc, res, hs in grows:
        if m < 64 * 2 ** 20:
            continue
        print(f"  {phase}: +{m / GIB:.2f} GiB for {req / GIB:.3f} GiB; allocated {alloc / GIB:.2f}, "
              f"reserved {res / GIB:.2f}; holes " + ", ".join(f"{h / GIB:.3f}" for h, _ in hs))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
