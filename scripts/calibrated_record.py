#!/usr/bin/env python3
"""The held-out record of the calibrated GPUs (H100-SXM, H200) for dense training plans: the band and the
tie threshold every H100/H200 answer prints (specs/gpu_catalog.cpp kCalibratedMisses, docs/UNCERTAINTY.md).

For every plan of the held-out sets listed in SETS (half B, ran, on the GPU the plan names), the ratio
measured / predicted step time, the prediction being the one the set's report holds (made before the
plan ran, with the profile shipped at the time). Per GPU: the plans, the mean absolute error and the
5th and 95th percentiles of the ratio. Mixture-of-experts and LoRA/QLoRA plans have their own records
(kMoeRecords, kFinetuneRecords) and are left out here; so are diagnostic re-runs of seen plans, half-A
(development) plans, and sets asked for one GPU and run on another.

  python3 scripts/calibrated_record.py            print the records and each set's count
  python3 scripts/calibrated_record.py --check    exit 1 unless specs/gpu_catalog.cpp holds these records
"""
import glob, json, math, os, re, statistics, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Held-out sets of dense plans: report folders (globs) relative to validation/.
SETS = [
    # one and two GPUs, before 2026-11-27 (the record's first 330 plans)
    "archive/*/heldout*/**/validate",
    # one H100
    "h100/heldout19/run-sweep_h100_heldout19/validate", "h100/kernels/heldout/run-*/validate",
    "h100/fused/heldout", "h100/norms/heldout", "h100/qwen3/qwen3", "h100/window23/window23",
    "h100/attn_long/heldout/attn-long-heldout", "h100/mem24/measured",
    # two H100s
    "h100x2/heldout12/heldout12-*/validate",
    # four H100s (heldout20's runs ended with exit status 139 after writing their result files: read there)
    "h100x4/heldout20/heldout20-4gpu", "h100x4/heldout20/rank-*", "h100x4/fused/heldout",
    "h100x4/cp21/cp21-4gpu", "h100x4/cp22/cp22-4gpu", "h100x4/today22/dense-today-4gpu",
    "h100x4/today22b/cp-cudnn", "h100x4/heldout23/window-4gpu", "h100x4/heldout23/fp8-4gpu",
    # one H200
    "h200/kernels/validate", "h200/fp8_fused/heldout", "h200/fp8_fused2/heldout", "h200/today53/heldout",
    "h200/gemma3_54/heldout", "h200/qknorm56/heldout", "h200/gemma57/heldout", "h200/window60/heldout",
    # one and two H200s
    "h200x2/heldout18/run-sweep_h200_heldout18/validate", "h200x2/heldout18/run-sweep_h200x2_heldout18/validate",
    "h200x2-3d/run13/pp18", "h200x2/logits38/heldout", "h200x2/clock43/heldout", "h200x2/long44/heldout",
    "h200x2/cp45/heldout", "h200x2/cp47/heldout", "h200x2/rank46/rank-*", "x2/heldout23/heldout23-2xH200",
    # four H200s
    "h200x4/heldout39/heldout", "h200x4/offload40/heldout", "h200x4/rank41/rank-*", "h200x4/four68/heldout",
    "h200x4/four68/rank-*",
    "h200x2/pp70/heldout", "h200x2/pp75/heldout", "h200x4/pp79/heldout", "h200x2/vpp81/heldout", "h200x2/dense83/heldout", "h200x2/full85/heldout",
]
GPUS = {"H100-SXM": "H100", "H200": "H200"}  # the plan's GPU -> what the machine's name must contain


def plan_ratio(folder, report, p):
    """measured / predicted for one plan, or None: half B, ran (or wrote a full result file), like for like."""
    if p.get("half") != "B" or p.get("gpu") not in GPUS:
        return None
    plan = p.get("strategy", "")
    if "finetune" in plan or "ep=" in plan and "ep=1," not in plan + ",":
        return None
    gpu_name = (report.get("machine") or {}).get("gpu_name", "")
    m, pred = (p.get("measured") or {}).get("step_seconds"), (p.get("predicted") or {}).get("step_seconds")
    if p.get("status") != "ran":
        f = os.path.join(folder, "runs", p["name"] + ".json")
        if not os.path.exists(f):
            return None
        r = json.load(open(f))
        s = (r.get("measurement") or {}).get("step_seconds")
        m = s.get("median") if isinstance(s, dict) else s
        gpu_name = gpu_name or (r.get("machine") or {}).get("gpu_name", "")
    if GPUS[p["gpu"]] not in gpu_name:
        return None
    if not m or not pred:
        return None
    model_file = os.path.join(folder, "plans", p["name"] + ".json")
    if os.path.exists(model_file):
        spec = json.load(open(model_file)).get("model", {})
        if isinstance(spec, dict) and (spec.get("moe") or {}).get("experts", 0) > 1:
            return None
    return m / pred


def plans():
    """(folder, report, plan entry, measured / predicted) of every plan the record counts, once each."""
    seen = set()
    for pattern in SETS:
        for rep in sorted(glob.glob(os.path.join(ROOT, "validation", pattern, "report.json"), recursive=True)):
            folder = os.path.dirname(rep)
            report = json.load(open(rep))
            if report.get("predict_only"):
                continue
            for p in report.get("plans", []):
                r = plan_ratio(folder, report, p)
                key = (os.path.relpath(folder, ROOT), p["name"])
                if r is None or key in seen:
                    continue
                seen.add(key)
                yield folder, report, p, r


def collect():
    rows = {}
    for folder, _, p, r in plans():
        rows.setdefault(p["gpu"], []).append((os.path.relpath(folder, ROOT), p["name"], r))
    return rows


def record(ratios):
    xs = sorted(ratios)
    q = lambda f: xs[min(len(xs) - 1, max(0, round(f * (len(xs) - 1))))]
    return {"plans": len(xs), "low": round(q(0.05), 3), "high": round(q(0.95), 3),
            "mape_pct": round(100 * statistics.mean(abs(x - 1) for x in xs), 1)}


def main():
    check = "--check" in sys.argv[1:]
    if set(sys.argv[1:]) - {"--check"}:
        print("calibrated_record.py: usage: calibrated_record.py [--check]", file=sys.stderr)
        sys.exit(2)
    rows = collect()
    recs = {g: record([r for _, _, r in v]) for g, v in sorted(rows.items())}
    if not check:
        by_set = {}
        for g, v in rows.items():
            for folder, _, _ in v:
                by_set[(g, folder)] = by_set.get((g, folder), 0) + 1
        for (g, folder), n in sorted(by_set.items()):
            print(f"{g:9s} {n:3d}  {folder}")
        for g, r in recs.items():
            print(f"{g}: {r['plans']} plans, MAPE {r['mape_pct']}%, 5-95% of measured/predicted {r['low']}-{r['high']}")
        return
    src = open(os.path.join(ROOT, "specs", "gpu_catalog.cpp")).read()
    bad = []
    for g, r in recs.items():
        m = re.search(r'\{"' + re.escape(g) + r'", ([0-9.]+), ([0-9.]+), ([0-9.]+), ([0-9]+)\}', src)
        want = (r["low"], r["high"], r["mape_pct"], r["plans"])
        if not m or tuple(float(x) for x in m.groups()) != tuple(float(x) for x in want):
            bad.append(f"{g}: specs/gpu_catalog.cpp kCalibratedMisses has {m.groups() if m else 'nothing'}, the reports say "
                       f"{want} (run scripts/calibrated_record.py and update it)")
    for b in bad:
        print("calibrated_record.py: " + b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
