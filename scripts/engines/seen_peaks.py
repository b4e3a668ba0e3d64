#!/usr/bin/env python3
"""`memory --engine` against the engines' measured peaks (validation/engines, runs 1-4), for one or two builds.

  python3 scripts/engines/seen_peaks.py --planner build/planner [--before OLD/planner]

Each run's trainer reports peak_allocated_bytes = the maximum over ranks of
torch.cuda.max_memory_allocated(), which does not see the CUDA context, NCCL's
buffers or the caching allocator's reserved-but-free slack. So beside the
predicted peak this prints the "allocator view": the peak less the profile's
context_bytes, nccl_communicator_bytes per communicator used (dp, tp, pp) and
the fragmentation term (1.5% of the activations and logits at the peak). Run1
ran on 4x H100 with the calib20 profile; runs 2 and 3 on H200s, predicted with
the catalog's H200 profile (--gpus 4xH200 / 2xH200 and the plan's model,
strategy, seq and batch), as validation/engines/README.md says; run 4 on 2x
H100 with the catalog's H100 profile (--gpus 2xH100).
"""
import argparse
import json
import os
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
G = 2**30
RUNS = [  # (run, plans, results, gpus, profile file or None)
    ("run1", "validation/engines/plans", "validation/engines/h100x4/run1/engines", "4xH100",
     "validation/h100x4/calib20/profile-4gpu.json"),
    ("run2", "validation/engines/plans2", "validation/engines/h200x4/run2/engines", "4xH200", None),
    ("run3", "validation/engines/plans3", "validation/engines/x2/run3/engines", "2xH200", None),
    ("run4", "validation/engines/plans4", "validation/engines/x2/run4/engines", "2xH100", None),
]
CATALOG = {"H100": "costmodel/profiles/H100-SXM.json", "H200": "costmodel/profiles/H200.json"}


def constants(profile_path):
    p = json.load(open(os.path.join(ROOT, profile_path)))
    return p.get("context_bytes", 0.75 * G), p.get("nccl_communicator_bytes", 990 * 2**20)


def planner_json(binary, command, plan_path, engine, gpus, profile):
    """`planner COMMAND --engine ENGINE --json` for a run's plan: with its profile (--plan), or else the catalog's
    profile of the GPUs that ran (the plan's model, strategy, seq and batch on `gpus`); None if it fails."""
    p = json.load(open(plan_path))
    if profile:
        cmd = [binary, command, "--plan", plan_path, "--profile", os.path.join(ROOT, profile)]
    else:
        cmd = [binary, command, "--model", p["model"]["name"], "--gpus", gpus, "--strategy", p["strategy"]["text"],
               "--seq", str(p["seq"]), "--global-batch", str(p["global_batch"])]
    out = subprocess.run(cmd + ["--engine", engine, "--json"], capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout) if out.returncode == 0 else None


def predict(binary, plan_path, engine, gpus, profile):
    j = planner_json(binary, "memory", plan_path, engine, gpus, profile)
    if j is None:
        return None
    ctx, nccl = constants(profile or CATALOG[gpus.split("x")[-1]])
    st, bd = j["plan"]["strategy"], j["breakdown"]
    comms = (st["dp"] > 1) + (st["tp"] > 1) + (st["pp"] > 1)
    alloc = j["per_gpu_peak_bytes"] - ctx - comms * nccl - 0.015 * (bd["activations"] + bd["logits_loss"])
    return j["per_gpu_peak_bytes"], alloc, j.get("peak_moment", "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--planner", required=True)
    ap.add_argument("--before")
    a = ap.parse_args()
    builds = [("before", a.before)] if a.before else []
    builds.append(("after" if a.before else "now", a.planner))
    head = "| run | plan | engine | measured (GiB) |"
    for k, _ in builds:
        head += f" {k}: peak | err | allocator view | err |"
    print(head + " peak moment |")
    print("|" + "---|" * (4 + 4 * len(builds) + 1))
    errs = {}
    for run, plans, results, gpus, profile in RUNS:
        for f in sorted(os.listdir(os.path.join(ROOT, results))):
            if not f.endswith(".result.json"):
                continue
            name = f[: -len(".result.json")]
            res = json.load(open(os.path.join(ROOT, results, f)))
            meas, engine = res["peak_allocated_bytes"], res["engine"]
            line = f"| {run} | {name} | {engine} | {meas / G:.2f} |"
            moment = ""
            for k, b in builds:
                r = predict(b, os.path.join(ROOT, plans, name + ".json"), engine, gpus, profile)
                e1, e2 = (r[0] / meas - 1) * 100, (r[1] / meas - 1) * 100
                errs.setdefault((engine, k), []).append((abs(e1), abs(e2)))
                line += f" {r[0] / G:.2f} | {e1:+.1f}% | {r[1] / G:.2f} | {e2:+.1f}% |"
                moment = r[2]
            print(line + f" {moment} |")
    print()
    for (engine, k), v in sorted(errs.items()):
        print(f"- {engine} {k}: {len(v)} runs, MAPE of the peak {statistics.mean(x for x, _ in v):.1f}%, "
              f"of the allocator view {statistics.mean(y for _, y in v):.1f}%")


if __name__ == "__main__":
    main()
