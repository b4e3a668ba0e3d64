#!/usr/bin/env python3
"""Loss agreement and pipeline bubbles of a device run (validation/suites/h200x2_3d_exec.json).
Usage: losses_vs.py OUT_DIR REFERENCE_NAME
 - every *.exec.json's losses against the reference run's (same global batch,
   same initial values; bf16 runs differ by reduction order only);
 - for every *.trace.json (planner exec --trace): per pipeline stage, the
   bubble = the step's span minus the time the stage spends in forward and
   backward, predicted (simulator, pids < 1000) and measured (CUDA events on
   each rank's compute stream, pids >= 1000), both from the same file."""
import glob
import json
import os
import sys

out, refname = sys.argv[1], sys.argv[2]
runs = {os.path.basename(f)[:-10]: json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "*.exec.json")))}
if refname in runs:
    base = runs[refname]["measurement"]["losses"]
    for n, r in runs.items():
        if n == refname:
            continue
        l = r["measurement"]["losses"]
        d = [abs(a - b) for a, b in zip(l, base)]
        if d:
            print(f"bf16 losses {n} vs {refname}: max |diff| {max(d):.2e} over {len(d)} steps "
                  f"(first {l[0]:.4f} vs {base[0]:.4f}, last {l[-1]:.4f} vs {base[-1]:.4f})")


def is_fb(e):
    n = e["name"]
    if e["pid"] < 1000:
        return e.get("cat") == "compute" and (n.startswith("F ") or n.startswith("B "))
    # measured: "<stage>F<mb>.<unit>" / "<stage>B<mb>.<unit>"
    k = n.lstrip("0123456789")
    return k[:1] in ("F", "B") and k[1:2].isdigit()


for f in sorted(glob.glob(os.path.join(out, "*.trace.json"))):
    t = json.load(open(f))
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    names = {e["pid"]: e["args"]["name"] for e in t["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"}
    print(f"pipeline bubble, {os.path.basename(f)} (step span - forward/backward time, per stage or rank):")
    for pid in sorted({e["pid"] for e in ev}):
        mine = [e for e in ev if e["pid"] == pid]
        span = (max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)) / 1e6
        fb = sum(e["dur"] for e in mine if is_fb(e)) / 1e6
        kind = "measured " if pid >= 1000 else "predicted"
        print(f"  {kind} {names.get(pid, pid)!s:45s} span {span:.4f} s, F+B {fb:.4f} s, "
              f"bubble {span - fb:.4f} s ({100 * (span - fb) / span:.1f}%)")
