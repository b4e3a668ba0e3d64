#!/usr/bin/env python3
"""clocks.csv (nvidia-smi every 200 ms: index, timestamp, SM clock, power, temperature) over each plan's
exec window (NAME-clock.start/.end), the samples drawing over 300 W (the step running), all four GPUs."""
import datetime
rows = []
for l in open("clocks.csv"):
    p = [x.strip() for x in l.split(",")]
    if len(p) < 5 or not p[0].isdigit():
        continue
    t = datetime.datetime.strptime(p[1], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
    rows.append((int(p[0]), t, float(p[2].split()[0]), float(p[3].split()[0]), float(p[4])))
q = lambda xs, f: xs[int(f * (len(xs) - 1))]
print("| plan | samples | SM clock median (p10-p90) MHz | power median (p90) W | temperature median C |")
print("|---|---|---|---|---|")
for n in ["llama3b", "qwen7b", "gpt2xl"]:
    a, b = (float(open(f"{n}-clock.{e}").read()) for e in ("start", "end"))
    sel = [r for r in rows if a < r[1] < b and r[3] > 300]
    clk, pw, tc = (sorted(r[i] for r in sel) for i in (2, 3, 4))
    print(f"| {n} | {len(sel)} | {q(clk, .5):.0f} ({q(clk, .1):.0f}-{q(clk, .9):.0f}) | {q(pw, .5):.0f} ({q(pw, .9):.0f}) | {q(tc, .5):.0f} |")
