#!/usr/bin/env python3
"""clocks.csv (nvidia-smi every 200 ms: index, timestamp, SM clock, power, temperature) over each plan's
window (from the previous plan's result time to its own, heldout/runs/NAME.json "created"), the samples
drawing over 300 W (the step running), per GPU; with the kernel classes of the profiled step."""
import datetime, json, os, sys
if not (os.path.exists("clocks.csv") and os.path.exists("heldout/report.json")):
    print("summarize.py: run it in validation/h200x2/clock43 (clocks.csv and heldout/report.json not found here)", file=sys.stderr)
    sys.exit(2)
names = ["llama3b-1gpu-mbs6", "llama3b-dp2-z2-mbs6", "llama3b-dp2-z2-mbs8", "gpt2xl-1gpu-mbs16",
         "gpt2xl-dp2-z2-mbs16", "qwen7b-dp2-z3-mbs6"]
ts = lambda s, f: datetime.datetime.strptime(s, f).replace(tzinfo=datetime.timezone.utc).timestamp()
rows = []
for l in open("clocks.csv"):
    p = [x.strip() for x in l.split(",")]
    if len(p) < 5 or not p[0].isdigit():
        continue
    rows.append((int(p[0]), ts(p[1], "%Y/%m/%d %H:%M:%S.%f"), float(p[2].split()[0]), float(p[3].split()[0]), float(p[4])))
q = lambda xs, f: xs[int(f * (len(xs) - 1))] if xs else float("nan")
print("| plan | GPU | samples | SM clock median (p10-p90) MHz | power median W | GEMM pred/meas s | attention pred/meas s | step err |")
print("|---|---|---|---|---|---|---|---|")
rep = {p["name"]: p for p in json.load(open("heldout/report.json"))["plans"]}
prev = rows[0][1]
for n in names:
    end = ts(json.load(open(f"heldout/runs/{n}.json"))["created"], "%Y-%m-%dT%H:%M:%SZ")
    p = rep[n]
    k = (p["causes"]["step"].get("kernel_classes") or {})
    g = lambda c: f"{k.get(c, {}).get('predicted', 0):.4f}/{k.get(c, {}).get('measured', 0):.4f}" if k else "-"
    for gpu in range(p["world"]):  # a one-GPU plan runs on GPU 0
        sel = [r for r in rows if r[0] == gpu and prev < r[1] < end and r[3] > 300]
        if not sel:
            continue
        clk, pw = sorted(r[2] for r in sel), sorted(r[3] for r in sel)
        print(f"| {n} | {gpu} | {len(sel)} | {q(clk, .5):.0f} ({q(clk, .1):.0f}-{q(clk, .9):.0f}) | {q(pw, .5):.0f} | "
              f"{g('gemm')} | {g('attention')} | {p['errors']['step_seconds_pct']:+.1f}% |")
    prev = end
