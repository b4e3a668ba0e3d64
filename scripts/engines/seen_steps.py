#!/usr/bin/env python3
"""`predict --engine`'s step time against the engines' measured steps (validation/engines, runs 1-5), for one or
two builds: every launch there is seen data (run1 fitted the first model's constants; all were looked at).

  python3 scripts/engines/seen_steps.py --planner build/planner [--before OLD/planner] [--profile P.json]

Each launch is predicted as validation/engines/README.md says: run1 with the calib20 profile (4x H100), the
others with the catalog's profile of the GPUs that ran (--gpus and the plan's model, strategy, seq and batch).
--profile adds a profile file to every call after run1's (e.g. one carrying an "engine_host" section).
Prints each launch (measured median step, each build's engine step and error) and the MAPE per engine and
overall.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seen_peaks  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (run, plans, results, gpus, profile file or None): seen_peaks.py's runs 1-4, and run 5.
RUNS = seen_peaks.RUNS + [("run5", "validation/engines/plans5", "validation/engines/x2/run5/engines", "2xH200", None)]


def engine_step(binary, plan_path, engine, gpus, profile):
    j = seen_peaks.planner_json(binary, "predict", plan_path, engine, gpus, profile)
    return None if j is None else j["engine_step"]["step_seconds"]


def launches():
    for run, plans, results, gpus, profile in RUNS:
        for name in sorted(os.listdir(os.path.join(ROOT, results))):
            if not name.endswith(".result.json"):
                continue
            n = name[: -len(".result.json")]
            plan = os.path.join(ROOT, plans, n + ".json")
            if os.path.exists(plan):
                r = json.load(open(os.path.join(ROOT, results, name)))
                yield run, n, r["engine"], r["median_step_s"], plan, gpus, profile


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--planner", required=True)
    ap.add_argument("--before", help="an older planner binary to put beside")
    ap.add_argument("--profile", help="a profile file for every launch but run1's (which keeps calib20)")
    a = ap.parse_args()
    builds = [("after", a.planner)] + ([("before", a.before)] if a.before else [])
    rows = []
    for run, n, engine, meas, plan, gpus, profile in launches():
        prof = os.path.join(ROOT, profile) if profile else a.profile
        preds = [engine_step(b, plan, engine, gpus, prof) for _, b in builds]
        rows.append((run, n, engine, meas, preds))
        cells = "  ".join(f"{k} {p:.4f} ({(p - meas) / meas * 100:+6.1f}%)" if p else f"{k} -"
                          for (k, _), p in zip(builds, preds))
        print(f"{run:5} {n:26} {engine:9} measured {meas:.4f}  {cells}")
    for e in ("deepspeed", "fsdp", "megatron", None):
        sel = [r for r in rows if e is None or r[2] == e]
        out = []
        for i, (k, _) in enumerate(builds):
            errs = [(r[4][i] - r[3]) / r[3] for r in sel if r[4][i]]
            if errs:
                out.append(f"{k}: MAPE {100 * statistics.mean(abs(x) for x in errs):.1f}% "
                           f"(range {100 * min(errs):+.0f}%..{100 * max(errs):+.0f}%)")
        print(f"{e or 'all':9} {len(sel)} launches  " + "  ".join(out))


if __name__ == "__main__":
    main()
