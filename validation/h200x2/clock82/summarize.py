#!/usr/bin/env python3
"""clocks.csv (nvidia-smi every 100 ms: index, timestamp, SM clock, power, temperature) over each plan's
exec window (NAME.start/.end), per GPU (GPU 0 runs pipeline stage 0, GPU 1 the last stage), every sample
(idle bubbles included) and those drawing over 300 W."""
import datetime, gzip, os, sys
rows = []
for l in gzip.open("clocks.csv.gz", "rt") if os.path.exists("clocks.csv.gz") else open("clocks.csv"):
    p = [x.strip() for x in l.split(",")]
    if len(p) < 5 or not p[0].isdigit():
        continue
    t = datetime.datetime.strptime(p[1], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
    rows.append((int(p[0]), t, float(p[2].split()[0]), float(p[3].split()[0]), float(p[4])))
q = lambda xs, f: xs[int(f * (len(xs) - 1))] if xs else float("nan")
print("| plan | GPU | samples | SM clock median (p10-p90) MHz | power median (p90) W | over 300 W: samples, clock median MHz |")
print("|---|---|---|---|---|---|")
for n in sys.argv[1:]:
    a, b = (float(open(f"{n}.{e}").read()) for e in ("start", "end"))
    for g in (0, 1):
        sel = [r for r in rows if a < r[1] < b and r[0] == g]
        busy = sorted(r[2] for r in sel if r[3] > 300)
        clk, pw = (sorted(r[i] for r in sel) for i in (2, 3))
        print(f"| {n} | {g} | {len(sel)} | {q(clk, .5):.0f} ({q(clk, .1):.0f}-{q(clk, .9):.0f}) | {q(pw, .5):.0f} ({q(pw, .9):.0f}) | {len(busy)}, {q(busy, .5):.0f} |")
