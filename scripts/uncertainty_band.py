#!/usr/bin/env python3
"""How far datasheet-only predictions miss on the GPUs this project calibrated (docs/UNCERTAINTY.md):
the step-time band every GPU without a measured profile prints (specs/gpu_catalog.cpp kDatasheetLow,
kDatasheetHigh, kDatasheetPlans).

The plans are those of scripts/calibrated_record.py (the dense held-out sets on H100 and H200, one to four
GPUs, half B, on the GPU the plan names). Each is predicted again with its GPU's calibration mark removed
(cluster.gpu.calibrated = ""), so the catalog's datasheet figures and the generic in-step defaults are used
as for any uncalibrated GPU, not the measured profile. The band is the 5th to 95th percentile of measured /
predicted over the plans that are neither fp32 nor CPU-offload (those miss further, and the note says so;
they are printed apart), rounded outward to two decimals.

  python3 scripts/uncertainty_band.py --planner build/planner [--json out.json] [--check]
  --check: exit 1 unless specs/gpu_catalog.cpp holds this band and count
"""
import argparse, json, math, os, re, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibrated_record as cr  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--planner", default="build/planner")
ap.add_argument("--json")
ap.add_argument("--check", action="store_true")
a = ap.parse_args()
if not os.path.exists(a.planner):
    print(f"uncertainty_band.py: {a.planner} not found (build it, or give --planner)", file=sys.stderr)
    sys.exit(2)

rows = []
with tempfile.TemporaryDirectory() as tmp:
    for folder, report, p, ratio in cr.plans():
        plan_file = os.path.join(folder, "plans", p["name"] + ".json")
        if not os.path.exists(plan_file):
            continue
        plan = json.load(open(plan_file))
        plan["cluster"]["gpu"]["calibrated"] = ""
        f = os.path.join(tmp, "p.json")
        json.dump(plan, open(f, "w"))
        r = subprocess.run([a.planner, "predict", "--plan", f, "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"skip {folder} {p['name']}: {r.stderr.strip()}", file=sys.stderr)
            continue
        measured = ratio * p["predicted"]["step_seconds"]
        strategy = p.get("strategy", "")
        rows.append({"report": os.path.relpath(folder, cr.ROOT), "plan": p["name"], "gpu": p["gpu"],
                     "world": p["world"], "measured_s": measured,
                     "datasheet_predicted_s": json.loads(r.stdout)["step_seconds"],
                     "fp32": "precision=fp32" in strategy, "offload": "offload=none" not in strategy})
for r in rows:
    r["ratio"] = r["measured_s"] / r["datasheet_predicted_s"]


def quantiles(xs):
    xs = sorted(xs)
    q = lambda f: xs[min(len(xs) - 1, max(0, round(f * (len(xs) - 1))))]
    return {"plans": len(xs), "min": xs[0], "p5": q(0.05), "p10": q(0.1), "median": statistics.median(xs),
            "p90": q(0.9), "p95": q(0.95), "max": xs[-1]}


main = [r["ratio"] for r in rows if not r["fp32"] and not r["offload"]]
summary = {"band_plans": quantiles(main), "all_plans": quantiles([r["ratio"] for r in rows]),
           "fp32": quantiles([r["ratio"] for r in rows if r["fp32"]]),
           "offload": quantiles([r["ratio"] for r in rows if r["offload"] and not r["fp32"]])}
for g in sorted({r["gpu"] for r in rows}):
    summary[g] = quantiles([r["ratio"] for r in rows if r["gpu"] == g and not r["fp32"] and not r["offload"]])
low = math.floor(summary["band_plans"]["p5"] * 100) / 100
high = math.ceil(summary["band_plans"]["p95"] * 100) / 100
summary["band"] = [low, high]
if a.json:
    json.dump({"summary": summary, "rows": rows}, open(a.json, "w"), indent=1)
if a.check:
    src = open(os.path.join(cr.ROOT, "specs", "gpu_catalog.cpp")).read()
    m = re.search(r"kDatasheetLow = ([0-9.]+), kDatasheetHigh = ([0-9.]+);\s*constexpr int kDatasheetPlans = ([0-9]+);", src)
    want = (low, high, len(main))
    if not m or (float(m.group(1)), float(m.group(2)), int(m.group(3))) != want:
        print(f"uncertainty_band.py: specs/gpu_catalog.cpp has {m.groups() if m else 'no band'}, the plans say {want}",
              file=sys.stderr)
        sys.exit(1)
    sys.exit(0)
for r in rows:
    print(f"{r['gpu']:<9} {r['world']} {r['plan']:<48} measured {r['measured_s']:.4f} s  datasheet "
          f"{r['datasheet_predicted_s']:.4f} s  ratio {r['ratio']:.3f}")
print(json.dumps(summary, indent=1))
