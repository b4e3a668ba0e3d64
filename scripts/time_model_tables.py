#!/usr/bin/env python3
"""The time-model docs' numbers that come from running the code, generated.

Runs the built binaries and rewrites the blocks between these markers:

    <!-- generated:bench:begin --> ... <!-- generated:bench:end -->
        docs/SIMULATOR.md sec. 7: `planner bench --json` (the pruned search) and
        `planner bench --json --no-prune` (every fitting strategy simulated)
    <!-- generated:long_run:begin --> ... <!-- generated:long_run:end -->
        docs/SIMULATOR.md sec. 6: the "long-run-cases {json}" lines that the extrapolation-vs-full-
        simulation cases of tests/unit/test_long_run.cpp print
    <!-- generated:published:begin --> ... <!-- generated:published:end -->
        docs/TIME_MODEL_CHECKS.md sec. 8: the "published-run {json}" lines that `unit_tests "[published]"`
        prints (tests/unit/test_published.cpp)

Counts, the best plan, its step time and the published table's predictions are
deterministic and written exactly. Search times vary by machine: they are
written with the machine they were measured on, and --check ignores them.

  scripts/time_model_tables.py [--build DIR]          rewrite the blocks in place
  scripts/time_model_tables.py --check [--build DIR]  exit 1 if a block's deterministic text is not what the code gives (ctest)
  scripts/time_model_tables.py --print [--build DIR]  print the blocks
Binaries: --planner PATH and --unit-tests PATH, or found under --build DIR (default: build/).
--machine TEXT names the machine the timings were measured on (default: from /proc/cpuinfo).
Python 3, standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys

from docgen import block_span, replace_block, write_if_changed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Which file holds each block (the time model's docs were split by topic).
DOCS = {"long_run": os.path.join(ROOT, "docs", "SIMULATOR.md"), "bench": os.path.join(ROOT, "docs", "SIMULATOR.md"),
        "published": os.path.join(ROOT, "docs", "TIME_MODEL_CHECKS.md")}
BLOCKS = ("long_run", "bench", "published")
LONG_RUN_TESTS = "long steps: extrapolation equals the full simulation*"
TIMING = "\x00timing\x00"  # stands for a timing in the masked rendering


def markers(name):
    return f"<!-- generated:{name}:begin -->", f"<!-- generated:{name}:end -->"


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def bench(planner, no_prune, repeats):
    cmd = [planner, "bench", "--json", "--repeats", str(repeats)] + (["--no-prune"] if no_prune else [])
    rc, out, err = run(cmd)
    if rc != 0:
        sys.exit(f"time_model_tables.py: {' '.join(cmd)} failed ({rc}): {err.strip()}")
    return json.loads(out)


def test_lines(unit_tests, spec, prefix):
    """The JSON of every line starting with prefix that unit_tests spec prints."""
    cmd = [unit_tests, spec]
    rc, out, err = run(cmd)
    rows = [json.loads(line[len(prefix):]) for line in out.splitlines() if line.startswith(prefix)]
    if not rows:
        sys.exit(f"time_model_tables.py: {' '.join(cmd)} printed no '{prefix.strip()}' lines ({rc}): {err.strip()}")
    if rc != 0:
        print(f"time_model_tables.py: warning: {' '.join(cmd)} failed ({rc}); its numbers are still used",
              file=sys.stderr)
    return rows


def machine_name():
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def sig2(x):
    """x to two significant figures, with thousands separators: 493038 -> 490,000."""
    return f"{float(f'{x:.2g}'):,.0f}"


def render_bench(pruned, full, machine, t):
    """The bench block; t() wraps every timing (machine-dependent) string."""
    q = pruned
    same = pruned["best_strategy"] == full["best_strategy"]
    wall, wall_full = f"{pruned['wall_seconds']:.3f}", f"{full['wall_seconds']:.1f}"
    rate = sig2(pruned["candidates_per_second"])
    return "\n".join([
        f"`planner bench` (`run_bench`) searches {q['model']} on {q['gpus']}, seq {q['seq']}, "
        f"global batch {q['global_batch']}: {q['candidates_evaluated']:,} strategies, "
        f"{q['candidates_memory_checked']:,} memory-checked ({q['candidates_not_fitting']:,} of them do not fit), "
        f"{q['candidates_simulated']:,} simulated, {q['pruned_by_bound']:,} pruned by the lower bound; "
        f"best plan `{q['best_strategy_short']}` ({q['best_step_seconds']:.3f} s per step).",
        f"Without pruning (`planner bench --no-prune`: {full['candidates_memory_checked']:,} memory-checked, "
        f"{full['candidates_not_fitting']:,} of them do not fit, {full['candidates_simulated']:,} simulated): "
        + ("the same best plan." if same else
           f"a different best plan, `{full['best_strategy_short']}` ({full['best_step_seconds']:.3f} s per step)."),
        f"Search time on one thread, measured on {t(machine)} (timings vary by machine and are not checked): "
        f"{t(wall)} s (best of {t(str(pruned['repeats']))}; ~{t(rate)} candidates/s), {t(wall_full)} s without pruning.",
        "",
        "Generated by `scripts/time_model_tables.py` from `planner bench --json` "
        "(with and without `--no-prune`); ctest (`time_model_tables`) checks everything but the timings.",
    ])


def render_long_run(rows):
    by = {r["costs"]: r for r in rows}
    real, rnd = by["real"], by["random"]

    def refused(r):
        n = r["refused"]
        return "none refused" if n == 0 else f"{n:,} more ({100 * n / (n + r['equal']):.1f}%) refused"

    backlog = real.get("backlog", 0)
    grows = (f" ({backlog:,} more refused where a collective stream's backlog grows without bound: "
             f"llama-2-7b at dp=2 with ZeRO-2, whose reduce-scatter outlasts each micro-batch's backward)") if backlog else ""
    return (f"Checked against the full simulation (tests/unit/test_long_run.cpp: schedules, pp 1-4, vpp 2-3, "
            f"ZeRO 0-3, offload, overlap on and off) to 1e-9 of the makespan: {real['equal']:,} real-model cases, "
            f"{refused(real)}{grows}; {rnd['equal']:,} random-cost cases, {refused(rnd)}; none answered differently. "
            f"(Generated by `scripts/time_model_tables.py` from the cases' `long-run-cases` lines.)")


def render_published(rows):
    def value(metric, x):
        return f"{100 * x:.1f}%" if metric == "MFU" else f"{x:.3g}"

    out = ["| run | source | GPUs | tp/pp/dp | metric | published | predicted | error |",
           "|---|---|---|---|---|---|---|---|"]
    previous = None
    for r in rows:
        source = "same" if r["cite"] == previous else r["cite"]
        previous = r["cite"]
        if r["vpp"] > 1:
            source += f" (interleaved, vpp {r['vpp']})"
        out.append(f"| {r['run']} | {source} | {r['gpus']} {r['gpu']} | {r['tp']}/{r['pp']}/{r['dp']} | "
                   f"{r['metric']} | {value(r['metric'], r['published'])} | {value(r['metric'], r['predicted'])} | "
                   f"{100 * r['error']:+.1f}% |")
    errs = [r["error"] for r in rows]
    multi = [r["error"] for r in rows if r["gpus"] > 8]  # more than one 8-GPU node
    out += ["",
            f"Over these {len(errs)} runs: MAPE {100 * sum(abs(e) for e in errs) / len(errs):.1f}%, "
            f"mean signed error {100 * sum(errs) / len(errs):+.1f}%, worst {100 * max(errs, key=abs):+.1f}%; "
            f"{len(multi)} of them span more than one node "
            f"(MAPE {100 * sum(abs(e) for e in multi) / max(len(multi), 1):.1f}%).",
            "",
            "Generated by `scripts/time_model_tables.py` from the `published-run` lines that "
            "`unit_tests \"[published]\"` prints (tests/unit/test_published.cpp); ctest (`time_model_tables`) "
            "checks that this table is what the code predicts."]
    return "\n".join(out)


def block_of(text, name):
    return block_span(text, *markers(name), os.path.relpath(DOCS[name], ROOT))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder holding planner and tests/unit_tests")
    ap.add_argument("--planner", help="the planner binary (default: BUILD/planner)")
    ap.add_argument("--unit-tests", help="the unit_tests binary (default: BUILD/tests/unit_tests)")
    ap.add_argument("--machine", help="the machine the timings are measured on (default: from /proc/cpuinfo)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a block's deterministic text is stale")
    ap.add_argument("--print", action="store_true", help="print the generated blocks")
    a = ap.parse_args()
    planner = a.planner or os.path.join(a.build, "planner")
    build = a.build if not a.planner else os.path.dirname(os.path.abspath(planner))
    unit_tests = a.unit_tests or os.path.join(a.build, "tests", "unit_tests")
    for path in (planner, unit_tests):
        if not os.access(path, os.X_OK):
            sys.exit(f"time_model_tables.py: {path} is not an executable (build first, or pass --build/--planner/--unit-tests)")

    # Timings are not checked: one repeat is enough for --check.
    pruned = bench(planner, False, 1 if a.check else 3)
    full = bench(planner, True, 1)
    rows = test_lines(unit_tests, "[published]", "published-run ")
    long_run = test_lines(unit_tests, LONG_RUN_TESTS, "long-run-cases ")
    machine = a.machine or machine_name()
    same = lambda s: s  # noqa: E731
    masked = lambda s: TIMING  # noqa: E731
    generated = {"long_run": (render_long_run(long_run),) * 2,
                 "bench": (render_bench(pruned, full, machine, same), render_bench(pruned, full, machine, masked)),
                 "published": (render_published(rows),) * 2}

    if a.print:
        for name in BLOCKS:
            print(f"{markers(name)[0]}\n{generated[name][0]}\n{markers(name)[1]}")
        return 0

    if a.check:
        stale = 0
        for name in BLOCKS:
            text = open(DOCS[name]).read()
            b, e = block_of(text, name)
            pattern = re.escape("\n" + generated[name][1] + "\n").replace(re.escape(TIMING), "[^\n]+?")
            if not re.fullmatch(pattern, text[b:e]):
                print(f"{os.path.relpath(DOCS[name], ROOT)}: the generated block '{name}' differs from what the code gives "
                      f"now (timings aside): run scripts/time_model_tables.py --build {build}",
                      file=sys.stderr)
                stale += 1
        return 1 if stale else 0

    for doc in sorted(set(DOCS.values())):
        text = open(doc).read()
        new = text
        for name in BLOCKS:
            if DOCS[name] == doc:
                new = replace_block(new, *markers(name), generated[name][0], os.path.relpath(doc, ROOT))
        write_if_changed(doc, text, new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
