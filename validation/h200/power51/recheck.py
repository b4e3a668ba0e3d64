#!/usr/bin/env python3
"""Every one-GPU H200 run under validation/ with a kernel table, predicted again with the power model
(branch power-clock's planner, whose H200 profile carries power-fit.json) and without it (the same profile,
power_cap_watts 0): GEMM, attention and step, (predicted - measured) / measured, off then on.
Run from the repository root with that branch built: python3 validation/h200/power51/recheck.py [PLANNER]"""
import glob, json, os, statistics, subprocess, sys, tempfile
X = sys.argv[1] if len(sys.argv) > 1 else "build/planner"
if not os.path.exists(X) or not os.path.exists("costmodel/profiles/H200.json"):
    print("recheck.py: run it from the repository root with the planner built (or give its path)", file=sys.stderr)
    sys.exit(2)
tmp = tempfile.mkdtemp()
prof = json.load(open("costmodel/profiles/H200.json"))
if not prof.get("power_cap_watts"):
    print("recheck.py: this checkout's H200 profile has no power model (branch power-clock has it)", file=sys.stderr)
    sys.exit(2)
prof["power_cap_watts"] = 0
off = os.path.join(tmp, "off.json"); json.dump(prof, open(off, "w"))
rows = []
for f in sorted(glob.glob("validation/**/*.json", recursive=True)):
    if "h200" not in f or "archive" in f: continue
    try: d = json.load(open(f))
    except Exception: continue
    if not isinstance(d, dict) or "measurement" not in d or "plan" not in d: continue
    m = d["measurement"]; k = m.get("kernels") if isinstance(m, dict) else None
    if not k or not k.get("by_class") or (m.get("world") or 1) != 1 or k["by_class"]["gemm_seconds"] <= 0: continue
    plan = os.path.join(tmp, "plan.json"); json.dump(d["plan"], open(plan, "w"))
    res = []
    for extra in (["--profile", off], []):
        r = subprocess.run([X, "predict", "--plan", plan, "--json"] + extra, capture_output=True, text=True)
        if r.returncode: break
        c = json.loads(r.stdout); b = c["breakdown"]["compute_by_class"]
        res.append((b["gemm_seconds"], b["attention_seconds"], c["step_seconds"]))
    if len(res) != 2: continue
    bc = k["by_class"]; st = m["step_seconds"]["median"] if isinstance(m["step_seconds"], dict) else m["step_seconds"]
    err = lambda p, q: p / q - 1 if q else 0.0
    rows.append((f, [err(res[i][0], bc["gemm_seconds"]) for i in (0, 1)],
                 [err(res[i][1], bc["attention_seconds"]) for i in (0, 1)], [err(res[i][2], st) for i in (0, 1)]))
print("run | GEMM off on | attention off on | step off on")
for f, g, a, s in rows:
    print(f"{f[11:75]:64s} {g[0]:+.3f} {g[1]:+.3f} | {a[0]:+.3f} {a[1]:+.3f} | {s[0]:+.3f} {s[1]:+.3f}")
groups = {"all": lambda n: True, "mixture of experts (dirs named moe*)": lambda n: "moe" in n,
          "LoRA/QLoRA (not moe)": lambda n: "lora" in n and "moe" not in n,
          "dense full training": lambda n: "moe" not in n and "lora" not in n}
mape = lambda xs: 100 * statistics.mean(abs(x) for x in xs)
for name, sel in groups.items():
    R = [r for r in rows if sel(r[0])]
    if R:
        print(f"{name}: {len(R)} runs; MAPE off -> on: GEMM {mape(r[1][0] for r in R):.2f}% -> {mape(r[1][1] for r in R):.2f}%, "
              f"attention {mape(r[2][0] for r in R):.2f}% -> {mape(r[2][1] for r in R):.2f}%, "
              f"step {mape(r[3][0] for r in R):.2f}% -> {mape(r[3][1] for r in R):.2f}%")
