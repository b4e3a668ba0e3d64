#!/usr/bin/env python3
"""How far datasheet-only predictions miss on the GPUs this project calibrated
(docs/UNCERTAINTY.md). For every plan of the held-out sets' validate reports
(each report.json under a held-out folder of validation/, archive included) that ran and has a measured
step time, predicts the plan again with its GPU's calibration mark removed
(cluster.gpu.calibrated = ""), so the catalog's datasheet figures and
efficiencies are used as for any uncalibrated GPU, not the measured profile;
prints measured / predicted per plan and the spread.

  python3 scripts/uncertainty_band.py --planner build/planner [--json out.json]
"""
import argparse, glob, json, math, os, statistics, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--planner", default="build/planner")
ap.add_argument("--json")
a = ap.parse_args()

reports = sorted(set(glob.glob("validation/*/heldout*/**/validate/report.json", recursive=True)
                     + glob.glob("validation/archive/*/heldout*/**/validate/report.json", recursive=True)))
rows, seen = [], set()
with tempfile.TemporaryDirectory() as tmp:
    for rep in reports:
        j = json.load(open(rep))
        for p in j.get("plans", []):
            m = (p.get("measured") or {}).get("step_seconds")
            if p.get("status") != "ran" or not m:
                continue
            plan_file = os.path.join(os.path.dirname(rep), "plans", p["name"] + ".json")
            if not os.path.exists(plan_file):
                continue
            plan = json.load(open(plan_file))
            key = (json.dumps(plan, sort_keys=True), round(m, 4))
            if key in seen:
                continue
            seen.add(key)
            plan["cluster"]["gpu"]["calibrated"] = ""
            f = os.path.join(tmp, "p.json")
            json.dump(plan, open(f, "w"))
            r = subprocess.run([a.planner, "predict", "--plan", f, "--json"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"skip {rep} {p['name']}: {r.stderr.strip()}", file=sys.stderr)
                continue
            pred = json.loads(r.stdout)["step_seconds"]
            rows.append({"report": rep, "plan": p["name"], "gpu": p["gpu"], "world": p["world"],
                         "measured_s": m, "datasheet_predicted_s": pred,
                         "calibrated_predicted_s": p["predicted"]["step_seconds"], "ratio": m / pred})
ratios = sorted(r["ratio"] for r in rows)
logs = [math.log(x) for x in ratios]
q = lambda f: ratios[min(len(ratios) - 1, max(0, round(f * (len(ratios) - 1))))]
summary = {"plans": len(rows), "min": ratios[0], "p10": q(0.1), "median": statistics.median(ratios),
           "p90": q(0.9), "max": ratios[-1], "log_sd": statistics.pstdev(logs),
           "calibrated_mape_pct": 100 * statistics.mean(abs(r["measured_s"] / r["calibrated_predicted_s"] - 1) for r in rows)}
for r in rows:
    print(f"{r['gpu']:<9} {r['world']} {r['plan']:<48} measured {r['measured_s']:.4f} s  datasheet {r['datasheet_predicted_s']:.4f} s  ratio {r['ratio']:.3f}")
print(json.dumps(summary, indent=1))
if a.json:
    json.dump({"summary": summary, "rows": rows}, open(a.json, "w"), indent=1)
