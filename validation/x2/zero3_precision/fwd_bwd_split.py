"""Split each run's measured kernels of one step (rank 0, measurement.kernels.top)
into forward and backward by kernel name, and compare with the one-GPU twin.

GEMMs: cuBLAS/nvjet names end in the operands' layouts. A torch Linear's forward
is gemm(T,N) (names ..._TN?), its input gradient gemm(N,N) (..._NN?) and its
weight gradient gemm(N,T) (..._NT?, 'badd' = accumulated into .grad). This is a
reading of the names, not something the runtime records.
Attention: cuDNN sdpa 'fprop' is forward; 'bprop', compute_dot_do_o and
convert_dq are backward. Memory-bound kernels are not split (most names serve both).
Run from this folder: python3 fwd_bwd_split.py
"""
import json, re

RUNS = ["opt-2.7b-dp1-fp16-mbs4", "opt-2.7b-dp2-z3-fp16-mbs4", "opt-2.7b-dp2-z3-bf16-mbs4"]


def split(run):
    m = json.load(open(f"diag/runs/{run}.json"))["measurement"]
    k = m["kernels"]
    out = {"gemm_fwd": 0.0, "gemm_bwd": 0.0, "attn_fwd": 0.0, "attn_bwd": 0.0, "other": 0.0}
    for t in k["top"]:
        n, c, s = t["name"], t["class"], t["seconds"]
        if c == "gemm":
            lay = re.search(r"_([NT]{3})$", n).group(1)
            out["gemm_fwd" if lay.startswith("TN") else "gemm_bwd"] += s
        elif c == "attention":
            out["attn_fwd" if "fprop" in n else "attn_bwd"] += s
        else:
            out["other"] += s
    out["gemm_total"] = k["by_class"]["gemm_seconds"]
    out["gemm_in_top"] = out["gemm_fwd"] + out["gemm_bwd"]
    out["memory_bound"] = k["by_class"]["memory_bound_seconds"]
    out["F_action"] = m["action_seconds"]["F"]
    out["B_action"] = m["action_seconds"]["B"]
    return out


if __name__ == "__main__":
    r = {run: split(run) for run in RUNS}
    twin = r[RUNS[0]]
    keys = ["gemm_fwd", "gemm_bwd", "attn_fwd", "attn_bwd", "memory_bound", "F_action", "B_action"]
    print("%-28s" % "run" + "".join("%18s" % k for k in keys))
    for run in RUNS:
        print("%-28s" % run + "".join("%9.4f (%5.3fx)" % (r[run][k], r[run][k] / twin[k]) for k in keys))
    for run in RUNS:
        assert abs(r[run]["gemm_in_top"] - r[run]["gemm_total"]) < 1e-4, run  # every GEMM name is in top
