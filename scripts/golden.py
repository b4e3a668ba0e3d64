#!/usr/bin/env python3
"""The golden prediction check: refactors must not move predictions.

Runs `planner predict --json` and `planner memory --json` on every plan file under
examples/plans/ and every plan of every sweep (validation/sets/*.json; before the move, sweep_*.json
under examples/), and `planner plan --json` on ten fixed questions, and
compares the answers with tests/golden/golden.json.gz (stored once from the commit
before a change). A difference fails the check; a commit that moves predictions
on purpose rewrites the file with --write and says why in its message.

  scripts/golden.py --planner build/planner --check      # CI (tests/CMakeLists.txt)
  scripts/golden.py --planner build/planner --write      # after an intended change
  scripts/golden.py --planner new/planner --against old/planner   # two builds, no file

Cases are keyed by the sweep's file name and the plan's name (not by path), so
moving a sweep between folders keeps its keys. Exit 0: identical; 1: differences
(listed, with the first differing field of each); 2: bad input.
"""
import argparse
import glob
import gzip
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Gzipped (5.3 MB of JSON, 0.3 MB stored): the device tool copies the tracked tree under a 64 MiB limit.
GOLDEN = os.path.join(ROOT, "tests", "golden", "golden.json.gz")

# Ten questions people ask `plan`: the search result of each is part of the check.
PLAN_QUESTIONS = [
    ["--model", "llama-2-7b", "--gpus", "4xH100", "--global-batch", "32"],
    ["--model", "llama-2-7b", "--gpus", "8xH100", "--global-batch", "64", "--seq", "4096"],
    ["--model", "llama-2-70b", "--gpus", "8x8xH100", "--global-batch", "256", "--seq", "4096"],
    ["--model", "gpt2-xl", "--gpus", "2xRTX3090", "--global-batch", "16"],
    ["--model", "gpt-neo-2.7b", "--gpus", "2xH200", "--global-batch", "16", "--seq", "2048"],
    ["--model", "opt-1.3b", "--gpus", "1xH100", "--global-batch", "8", "--seq", "2048"],
    ["--model", "llama-2-13b", "--gpus", "4x8xA100", "--global-batch", "128", "--seq", "4096"],
    ["--model", "gpt2-large", "--gpus", "1xA100", "--global-batch", "32", "--seq", "1024"],
    ["--model", "llama-2-7b", "--gpus", "2xRTX4090", "--global-batch", "8", "--seq", "2048"],
    ["--model", "bert-large", "--gpus", "2xH100", "--global-batch", "64", "--seq", "512"],
]


def sweep_files():
    files = sorted(glob.glob(os.path.join(ROOT, "examples", "sweep_*.json")))
    files += sorted(glob.glob(os.path.join(ROOT, "validation", "sets", "*.json")))
    return files


def cases():
    """(key, argv) pairs; argv without the planner binary."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "plans", "**", "*.json"), recursive=True)):
        rel = os.path.relpath(path, os.path.join(ROOT, "examples", "plans"))
        for cmd in ("predict", "memory"):
            out.append((f"plan:{rel}:{cmd}", [cmd, "--plan", path, "--json"]))
    for path in sweep_files():
        with open(path) as f:
            sweep = json.load(f)
        base = os.path.dirname(path)
        gpus = sweep.get("defaults", {}).get("gpus")
        sname = os.path.basename(path)
        for p in sweep["plans"]:
            if "plan" in p:
                ppath = p["plan"] if os.path.isabs(p["plan"]) else os.path.join(base, p["plan"])
                if not os.path.exists(ppath):  # sweeps moved beside examples/ name plans relative to it
                    ppath = os.path.join(ROOT, "examples", p["plan"])
                args = ["--plan", ppath]
            else:
                model = p["model"]
                for cand in (os.path.join(base, model), os.path.join(ROOT, "examples", model)):
                    if "/" in model and os.path.exists(cand):
                        model = cand
                        break
                args = ["--model", model, "--gpus", p.get("gpus", gpus), "--strategy", p["strategy"],
                        "--seq", str(p["seq"]), "--global-batch", str(p["global_batch"])]
            for cmd in ("predict", "memory"):
                out.append((f"sweep:{sname}:{p['name']}:{cmd}", [cmd] + args + ["--json"]))
    for i, q in enumerate(PLAN_QUESTIONS):
        out.append((f"question:{i}:{' '.join(q)}", ["plan"] + q + ["--json", "--quiet"]))
    return out


# The search's own speed and pruning counters are not predictions: they vary from
# run to run (wall time) or with how the search prunes, not with what it answers.
VOLATILE = {"wall_seconds", "candidates_per_second", "pruned_by_bound", "candidates_simulated",
            "candidates_memory_checked"}


def scrub(v):
    """Drops what legitimately differs between runs and checkouts: timings, absolute paths."""
    if isinstance(v, dict):
        return {k: scrub(x) for k, x in v.items() if k not in VOLATILE}
    if isinstance(v, list):
        return [scrub(x) for x in v]
    if isinstance(v, str) and ROOT in v:
        return v.replace(ROOT, "<root>")
    return v


def run_one(planner, argv):
    r = subprocess.run([planner] + argv, capture_output=True, text=True, cwd=ROOT)
    if r.returncode == 0:
        try:
            return {"rc": 0, "json": scrub(json.loads(r.stdout))}
        except json.JSONDecodeError:
            return {"rc": 0, "stdout": r.stdout.replace(ROOT, "<root>")}
    return {"rc": r.returncode, "stderr": r.stderr.replace(ROOT, "<root>").strip()}


def run_all(planner):
    cs = cases()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        results = list(ex.map(lambda c: run_one(planner, c[1]), cs))
    return {k: r for (k, _), r in zip(cs, results)}


def first_difference(a, b, path="", values_only=False):
    if type(a) is not type(b):
        return f"{path}: {json.dumps(a)[:80]} -> {json.dumps(b)[:80]}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if values_only and k not in a:
                continue
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'new' if k in b else 'golden'}"
            d = first_difference(a[k], b[k], f"{path}.{k}", values_only)
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items -> {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]", values_only)
            if d:
                return d
        return None
    return None if a == b else f"{path}: {json.dumps(a)[:80]} -> {json.dumps(b)[:80]}"


def compare(old, new, values_only=False):
    bad = 0
    for k in sorted(set(old) | set(new)):
        if k not in new:
            print(f"GONE   {k}")
            bad += 1
        elif k not in old:
            print(f"NEW    {k} (not in the golden file: --write to add it)")
            bad += 1
        else:
            d = first_difference(old[k], new[k], "", values_only)
            if d:
                print(f"MOVED  {k}{d}")
                bad += 1
    n = len(set(old) | set(new))
    print(f"{n - bad} passed, {bad} failed")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--planner", default=os.path.join(ROOT, "build", "planner"))
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="compare with tests/golden/golden.json.gz")
    g.add_argument("--write", action="store_true", help="rewrite tests/golden/golden.json.gz")
    g.add_argument("--against", metavar="OLD_PLANNER", help="compare with another build's answers")
    ap.add_argument("--values-only", action="store_true",
                    help="ignore fields the golden answers lack (a change that only adds output fields)")
    a = ap.parse_args()
    if not os.access(a.planner, os.X_OK):
        print(f"golden.py: --planner '{a.planner}' is not an executable", file=sys.stderr)
        return 2
    print(f"golden: {len(cases())} cases", file=sys.stderr)
    new = run_all(a.planner)
    if a.write:
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        text = json.dumps(new, indent=0, sort_keys=True) + "\n"
        with open(GOLDEN + ".tmp", "wb") as f:
            # mtime 0: the same answers give the same bytes.
            with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
                z.write(text.encode())
        os.replace(GOLDEN + ".tmp", GOLDEN)
        print(f"wrote {os.path.relpath(GOLDEN, ROOT)} ({len(new)} cases)")
        return 0
    if a.against:
        old = run_all(a.against)
    else:
        if not os.path.exists(GOLDEN):
            print(f"golden.py: {GOLDEN} is missing (--write creates it)", file=sys.stderr)
            return 2
        with gzip.open(GOLDEN, "rt") as f:
            old = json.load(f)
    return compare(old, new, a.values_only)


if __name__ == "__main__":
    sys.exit(main())
