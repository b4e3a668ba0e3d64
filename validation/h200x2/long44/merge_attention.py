#!/usr/bin/env python3
"""Merge a `planner calibrate --only attention,attention_window` profile (PART) into a shipped profile (BASE),
as validation/h100/attn_long did for the H100:

- 16-bit attention points at a sequence longer than BASE's longest for that head dimension are added, each
  scaled per head dimension and direction by BASE's rate over PART's rate at BASE's longest sequence (PART's
  relative rates are against the datasheet GEMM rate, its GEMM part not measured; BASE's against its in-step
  GEMM rate);
- 16-bit attention points at a head dimension BASE lacks (head_dim 256, validation/h200/qknorm56) are added,
  each scaled per direction by BASE's rate over PART's at the same sequence and the widest head dimension both
  have there;
- the windowed kernel's rates (relative to the full causal kernel at the same shape, so against no GEMM rate)
  are taken as measured, with PART's per-point table (attention_window_rates) when it has one.

  python3 merge_attention.py PART BASE OUT [RUN]    (RUN: the calibration's folder, named in the source)
"""
import json, os, sys

if len(sys.argv) not in (4, 5):
    print("merge_attention.py: usage: merge_attention.py PART BASE OUT [RUN] (three profile paths, the run's folder)",
          file=sys.stderr)
    sys.exit(2)
part, base, out = sys.argv[1:4]
run = sys.argv[4] if len(sys.argv) == 5 else "validation/h200x2/long44/calib"
try:
    P, B = json.load(open(part)), json.load(open(base))
    B["attention_rates"], B["source"]
except (OSError, ValueError, KeyError) as e:
    print(f"merge_attention.py: cannot read the profiles ({type(e).__name__}: {e})", file=sys.stderr)
    sys.exit(2)
key = lambda a: (a["precision"], a["head_dim"], a["seq"])
brates = {key(a): a for a in B["attention_rates"]}
prates = {key(a): a for a in P.get("attention_rates", [])}
added = []


def scaled(a, ref):
    """PART's point a, each direction scaled by BASE's rate over PART's at the point ref both have."""
    n = dict(a)
    for f in ("forward_relative", "backward_relative"):
        n[f] = a[f] * brates[ref][f] / prates[ref][f]
    return n


for (prec, d, s), a in sorted(prates.items()):
    if prec != "16-bit":
        continue
    longest = max((k[2] for k in brates if k[:2] == (prec, d)), default=0)
    if not longest or s <= longest or (prec, d, longest) not in prates:
        continue
    added.append(scaled(a, (prec, d, longest)))
base_dims = {k[1] for k in brates if k[0] == "16-bit"}
for (prec, d, s), a in sorted(prates.items()):
    if prec != "16-bit" or d in base_dims:
        continue
    ref = max((k[1] for k in brates if k[0] == prec and k[2] == s and (prec, k[1], s) in prates), default=0)
    if not ref:
        continue
    added.append(scaled(a, (prec, ref, s)))
B["attention_rates"] = sorted(B["attention_rates"] + added, key=lambda a: (a["precision"] != "16-bit", a["head_dim"], a["seq"]))
win = {f: P.get(f, 0) for f in ("attention_window_forward_relative", "attention_window_backward_relative")}
if all(v > 0 for v in win.values()):
    B.update(win)
    if P.get("attention_window_rates"):
        B["attention_window_rates"] = P["attention_window_rates"]
B["source"] += ("; attention_rates at " + ", ".join(f"d {a['head_dim']} seq {a['seq']}" for a in added) +
                " added and the windowed kernel's rates (attention_window_forward_relative, "
                "attention_window_backward_relative) taken from planner calibrate --only attention,attention_window on one "
                "H200 (" + run + "; each added point scaled per direction by this profile's rate over that run's at its "
                "head dimension's longest sequence, or for a new head dimension at the same sequence and the widest "
                "head dimension both have" + (", the windowed rates per head dimension and window "
                "(attention_window_rates) as measured" if "attention_window_rates" in P and all(v > 0 for v in win.values()) else "") +
                ": validation/h200x2/long44/merge_attention.py)")
tmp = out + ".tmp"
json.dump(B, open(tmp, "w"), indent=1)
os.replace(tmp, out)  # nothing half-written
print(f"merged into {out}: {len(added)} attention points added "
      + ", ".join(f"(d {a['head_dim']}, seq {a['seq']}: fwd {a['forward_relative']:.3f}, bwd {a['backward_relative']:.3f})" for a in added)
      + "; window " + ", ".join(f"{k} {v:.3f}" for k, v in win.items()))
