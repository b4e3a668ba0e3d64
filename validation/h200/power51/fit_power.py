#!/usr/bin/env python3
"""The power model's fields from power51's micro-benchmark loops (power.json.gz), nothing else.

At the power limit the GPU holds its mean power at the cap by lowering the SM clock f. Per class of
kernel (costmodel/power_clock.hpp):
  GEMMs:          P = P0 + e_gemm * R * (f/fmax)^(alpha-1)   (R: FLOP/s; energy per FLOP grows with f^(alpha-1))
  attention:      P = P0 + D_att * (f/fmax)^alpha
  memory-bound:   P = P0 + (P_mem - P0) * ((1 - rho) + rho * (f/fmax)^alpha)
The GEMM loops (15 shapes, all at the cap) give alpha and e_gemm by a straight line through
log((P - P0)/R) against log(f/fmax); the attention loops D_att at their clocks; the memory-bound loops
(all at fmax) P_mem; the GEMM/stream mixes rho (the clock of each mix solved with the fields above,
rho on a grid of 0.05, least squares in log clock). P0 is not determined by these loops (every loop
but the memory-bound ones sits at the cap): it is set to 200 W, and the clocks below move by under
1% between 100 and 300 W.
Usage: python3 fit_power.py [power.json.gz]  (prints the fields, writes power-fit.json)."""
import gzip, json, math, os, sys

path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "power.json.gz")
if not os.path.exists(path):
    print(f"fit_power.py: {path} not found", file=sys.stderr)
    sys.exit(2)
try:
    rows = {r["name"]: r for r in json.load(gzip.open(path, "rt"))["rows"]}
    _ = rows["gemm:llama-3.2-3b:T8192"], rows["mix-parts:add15"], rows["mem:add"]
except (OSError, ValueError, KeyError, TypeError) as e:
    print(f"fit_power.py: {path} is not power51's power.json.gz ({e})", file=sys.stderr)
    sys.exit(2)
FMAX, P0 = 1980.0, 200.0
med = lambda xs: sorted(xs)[len(xs) // 2]
gemm = [r for r in rows.values() if r.get("kind") == "gemm"]
cap = med([r["energy_W"] for r in gemm])
# alpha, e_gemm: y = log((P - P0)/R) = log e + (alpha - 1) x, x = log(f/fmax)
xs = [math.log(r["clock_median"] / FMAX) for r in gemm]
ys = [math.log((r["energy_W"] - P0) / (r["tflops"] * 1e12)) for r in gemm]
n = len(xs); mx, my = sum(xs) / n, sum(ys) / n
slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
alpha = 1 + slope
e_gemm = math.exp(my - slope * mx)
att = [r for r in rows.values() if r.get("kind") == "attn"]
d_att = med([(r["energy_W"] - P0) / (r["clock_median"] / FMAX) ** alpha for r in att])
mem = [r for r in rows.values() if r.get("kind") == "mem"]
p_mem = med([r["energy_W"] for r in mem])


def bisect(fn, lo=300.0, hi=FMAX):
    if fn(hi) <= 0:
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fn(mid) <= 0 else (lo, mid)
    return (lo + hi) / 2


# the mixes: the Llama-3.2-3B layer GEMMs (their loop's rate at its clock) and n stream adds
loop = rows["gemm:llama-3.2-3b:T8192"]
t_add = rows["mix-parts:add15"]["add_s"] / 15
p_add = rows["mem:add"]["energy_W"]


def mix_clock(adds, rho):
    fl = loop["tflops"] * 1e12 * loop["seconds_per_iter"]
    def excess(f):
        tg = loop["seconds_per_iter"] * loop["clock_median"] / f
        ta = adds * t_add
        e = P0 * (tg + ta) + e_gemm * fl * (f / FMAX) ** (alpha - 1) + ta * (p_add - P0) * ((1 - rho) + rho * (f / FMAX) ** alpha)
        return e / (tg + ta) - cap
    return bisect(excess)


mixes = [(r["adds"], r["clock_median"]) for r in rows.values() if r.get("kind") == "mix" and r["adds"] > 0]
best = min((sum(math.log(mix_clock(a, rho / 20) / c) ** 2 for a, c in mixes), rho / 20) for rho in range(21))
rho = best[1]
out = {"power_cap_watts": cap, "power_max_clock_mhz": FMAX, "power_base_watts": P0, "power_clock_exponent": alpha,
       "power_gemm_joules_per_flop": e_gemm, "power_attention_watts": d_att, "power_memory_watts": p_mem,
       "power_memory_clock_share": rho}
for k, v in out.items():
    print(f"{k:30s} {v:.6g}")
print("GEMM loops: clock measured / the fit's (at the cap):")
for r in gemm:
    f = bisect(lambda f: P0 + e_gemm * r["tflops"] * 1e12 * (f / r["clock_median"]) * (f / FMAX) ** (alpha - 1) - cap)
    print(f"  {r['name']:28s} {r['clock_median']:6.0f} {f:6.0f}")
print("mixes (adds: clock measured, the fit's):", [(a, c, round(mix_clock(a, rho))) for a, c in mixes])
json.dump(out, open(os.path.join(os.path.dirname(os.path.abspath(path)), "power-fit.json"), "w"), indent=1)
