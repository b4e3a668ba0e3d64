#!/usr/bin/env python3
"""Summary of a device run's planner exec results (validation/suites/h200x2_dist_dp.json): measured beside predicted for every
`planner exec` result in a folder, the PyTorch references beside them as
ratios, data-parallel scaling, and the bf16 loss agreement between runs that
compute the same global batch. Usage: dist_summary.py OUT_DIR"""
import glob
import json
import os
import sys

out = sys.argv[1]
G = 2 ** 30
ex, ref = {}, {}
for f in sorted(glob.glob(os.path.join(out, "*.exec.json"))):
    ex[os.path.basename(f)[:-10]] = json.load(open(f))
for f in sorted(glob.glob(os.path.join(out, "*.ref.json"))):
    ref[os.path.basename(f)[:-9]] = json.load(open(f))


def pct(p, m):
    return f"{(p - m) / m * 100:+.1f}%" if p and m else "n/a"


print(f"{'run':28s} {'step s':>8s} {'pred s':>8s} {'err':>7s} {'tok/s':>9s} {'MFU':>6s} "
      f"{'peak GiB':>9s} {'pred GiB':>9s} {'err':>7s} {'NCCL MiB':>9s} {'Sync s':>7s} {'pred exp':>8s}")
for n, e in ex.items():
    m, c = e["measurement"], e["comparison"]
    st = m["step_seconds"]["median"]
    pst = c["step_seconds"]["predicted"]
    peak = max([r["peak_bytes"] for r in m.get("ranks", [])] or [m["memory"]["total_bytes"]])
    ppeak = c["memory.peak_total"]["predicted"]
    nccl = max([r["comm_bytes"] for r in m.get("ranks", [])] or [0])
    sync = m.get("action_seconds", {}).get("Sync")
    pexp = c.get("exposed_comm_seconds", {}).get("predicted")
    print(f"{n:28s} {st:8.4f} {pst:8.4f} {pct(pst, st):>7s} {m['tokens_per_second']:9.0f} "
          f"{100 * (m['mfu'] or 0):5.1f}% {peak / G:9.2f} {ppeak / G:9.2f} {pct(ppeak, peak):>7s} "
          f"{nccl / 2**20:9.0f} {sync if sync is not None else float('nan'):7.4f} {pexp if pexp is not None else float('nan'):8.4f}")
    cats = m["memory"]["categories"]
    print("    measured  " + ", ".join(f"{k} {v / G:.2f}" for k, v in cats.items()))
    print("    predicted " + ", ".join(f"{k[7:]} {(c[k]['predicted'] or 0) / G:.2f}" for k in c
                                      if k.startswith("memory.") and k[7:] in cats))
    if m.get("cpu_adam_seconds"):
        print(f"    CPU AdamW {m['cpu_adam_seconds']:.3f} s, {m['cpu_adam_params_per_second']:.3g} params/s; "
              f"host memcpy {m['host_copy_gbps']:.1f} GB/s (read+write); host states {m['host_state_bytes'] / G:.1f} GiB, "
              f"host peak RSS {m['host_peak_bytes'] / G:.1f} GiB; predicted host "
              f"{(c.get('memory.host_node', {}).get('predicted') or 0) / G:.1f} GiB")
for n, r in ref.items():
    print(f"{n:28s} {r['step_seconds']['median']:8.4f} {'':8s} {'':7s} {r['tokens_per_second']:9.0f} "
          f"{100 * (r.get('mfu') or 0):5.1f}% {max(r.get('peak_reserved_bytes') or 0, 0) / G:9.2f}  (PyTorch {r['mode']}, reserved)")


def tps(n, d):
    return d[n]["measurement"]["tokens_per_second"] if n in d and "measurement" in d[n] else d[n]["tokens_per_second"]


print()
if "neo-dp1" in ex and "neo-dp2-zero0" in ex:
    print(f"DP scaling 1 -> 2 GPUs (tokens/s ratio / 2): {tps('neo-dp2-zero0', ex) / (2 * tps('neo-dp1', ex)):.3f}")
for ours, theirs in (("neo-dp2-zero0", "ddp"), ("neo-dp2-zero2", "fsdp2-r0"), ("neo-dp2-zero3", "fsdp2-r1"),
                     ("neo-dp2-zero1", "ddp")):
    if ours in ex and theirs in ref:
        print(f"{ours} / PyTorch {theirs} throughput: {tps(ours, ex) / ref[theirs]['tokens_per_second']:.3f}")
if "neo-dp1-gas8" in ex:
    base = ex["neo-dp1-gas8"]["measurement"]["losses"]
    for n in ("neo-dp2-zero0", "neo-dp2-zero1", "neo-dp2-zero2", "neo-dp2-zero3"):
        if n in ex:
            l = ex[n]["measurement"]["losses"]
            d = [abs(a - b) for a, b in zip(l, base)]
            print(f"bf16 losses {n} vs one GPU gas 8: max |diff| {max(d):.2e} over {len(d)} steps "
                  f"(first {l[0]:.4f} vs {base[0]:.4f}, last {l[-1]:.4f} vs {base[-1]:.4f})")
    if "ddp" in ref:
        l = ref["ddp"]["losses"]
        d = [abs(a - b) for a, b in zip(l, base)]
        print(f"bf16 losses PyTorch DDP vs planner one GPU gas 8: max |diff| {max(d):.2e}")
