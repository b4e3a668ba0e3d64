#!/usr/bin/env python3
"""The engines' host probe -> a profile's "engine_host" section (docs/ENGINE_TIME.md, docs/FORMATS.md).

  python3 scripts/engines/probe_to_profile.py --plan TINY_PLAN.json \
      [--eager-swiglu eager-llama.jsonl] [--eager-gelu eager-gpt2.jsonl] \
      [--ds-z1 R.result.json] [--ds-z2 R.result.json] [--ds-z3 R.result.json] \
      [--fsdp-z2 R.result.json] [--fsdp-z3 R.result.json] [--megatron R.result.json] \
      [--base PROFILE.json] [--source TEXT] [--planner PATH] -o PROFILE.json

Inputs are what the probe launches wrote on the training host (validation/suites/h200x1_engines8.json): the
eager model alone (`torch_model.py --probe PLAN --layers 4` and `--layers 16`, one PROBE line each, SwiGLU and
optionally GELU), and each engine trainer's ENGINE_RESULT on a tiny model (TINY_PLAN's model: too small to
keep the GPU busy, so a step is the host's own work). Each constant is the probe's host seconds over the count
the engine walks (torch_model.py's parameter tensors and submodules; layers for Megatron), less the eager
model's share:

- eager per layer = the slope of fwd_bwd_host_s between the two layer counts; GELU's outer = its 4-layer time
  less 4 layers;
- DeepSpeed ZeRO-1/2: (median_mb_host_s - eager) / tensors; tail = median_tail_host_s / tensors;
- DeepSpeed ZeRO-3: (median_mb_host_s - eager) / 2 passes, split between submodules and tensors in the
  ratio of the compiled-in constants (one model cannot separate them; probe6 solved two models together);
- FSDP2 zero 2/3: (median_mb_host_s - eager) / tensors; tail = median_tail_host_s / tensors;
- Megatron: median_host_step_s = gas x layers x per-layer + tail, split in the compiled-in ratio.

The compiled-in constants and the tiny model's counts are the planner's own (`planner predict --engine
deepspeed --json`, its engine_step.host_model), not copies kept here. A constant whose probe is not given keeps
the compiled-in value scaled by its family's probed ratio (ZeRO-1
from ZeRO-2 and back, FSDP2 zero 2 from zero 3 and back, DTensor from FSDP2), or unscaled when none of the
family was probed; the output's source says which were measured. Writes a profile JSON: the --base profile
(default: none, only "format") with "engine_host" set; `planner predict --profile` lays it over the GPU's
default profile, so older profiles and this one load alike.
"""
import argparse
import json
import os
import subprocess
import sys


def fail(msg):
    """Bad input: one line on stderr, exit 2, nothing written."""
    print(f"probe_to_profile: {msg}", file=sys.stderr)
    sys.exit(2)

def host_model(planner, plan):
    """The compiled-in constants (costmodel/engines_host.hpp EngineHostConstants), to scale the unprobed ones,
    and the tiny model's parameter tensors and submodules with parameters (costmodel/engines_time.cpp), as
    `planner predict --engine deepspeed --json` reports them ("engine_step"."host_model")."""
    try:
        out = subprocess.run([planner, "predict", "--plan", plan, "--engine", "deepspeed", "--json"],
                             capture_output=True, text=True, check=False)
    except OSError as e:
        fail(f"cannot run {planner} ({e}); build the planner or give --planner")
    if out.returncode != 0:
        fail(f"{planner} predict --plan {plan} --engine deepspeed: " + (out.stderr.strip().splitlines() or ["failed"])[-1])
    h = json.loads(out.stdout)["engine_step"]["host_model"]
    default = {k: v for k, v in h["compiled_in"].items() if k != "source"}
    return default, h["param_tensors"], h["param_modules"]


def eager_fit(path):
    """(per layer, outer) from the PROBE lines at two layer counts."""
    pts = sorted((j["layers"], j["fwd_bwd_host_s"]) for j in
                 (json.loads(line.split(" ", 1)[1]) for line in open(path) if line.startswith("PROBE ")))
    if len(pts) < 2 or pts[0][0] == pts[-1][0]:
        fail(f"{path} needs PROBE lines at two layer counts")
    (l0, t0), (l1, t1) = pts[0], pts[-1]
    per = (t1 - t0) / (l1 - l0)
    return per, t0 - l0 * per


def result(path):
    r = json.load(open(path))
    if r.get("median_host_step_s") is None:
        fail(f"{path} has no host timing (a trainer from before probe6?)")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True, help="the tiny model's plan (its model gives the counts)")
    ap.add_argument("--eager-swiglu", help="PROBE lines of the SwiGLU model (without: the compiled-in eager figures)")
    ap.add_argument("--eager-gelu")
    for k in ("ds-z1", "ds-z2", "ds-z3", "fsdp-z2", "fsdp-z3", "megatron"):
        ap.add_argument("--" + k)
    ap.add_argument("--base", help="a profile JSON to add the section to")
    ap.add_argument("--source", default="", help="where the probe ran (added to the section's source)")
    ap.add_argument("-o", "--output", required=True)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = [p for p in (os.path.join(here, "build", "planner"), os.path.join(here, "build-dev", "planner"))
             if os.path.exists(p)]
    ap.add_argument("--planner", default=found[0] if found else "planner",
                    help="the planner binary whose compiled-in constants and counts apply (default: build/planner, "
                         "else build-dev/planner)")
    a = ap.parse_args()
    for k in ("ds_z1", "ds_z2", "ds_z3", "fsdp_z2", "fsdp_z3", "megatron", "eager_swiglu", "eager_gelu"):
        f = getattr(a, k)
        if f and not os.path.exists(f):  # a probe that failed in the call: its constants stay compiled-in
            print(f"probe_to_profile: no {f}; {k} not measured", file=sys.stderr)
            setattr(a, k, None)
    m = json.load(open(a.plan))["model"]
    if m["mlp"] != "swiglu":
        fail("--plan must be the SwiGLU (Llama-like) tiny model the engine probes ran")
    DEFAULT, T, M = host_model(a.planner, a.plan)
    L = m["layers"]
    c = dict(DEFAULT)
    measured = []
    if a.eager_swiglu:
        c["eager_layer_swiglu_s"], _ = eager_fit(a.eager_swiglu)
        measured.append("eager SwiGLU")
    if a.eager_gelu:
        c["eager_layer_gelu_s"], c["eager_outer_gelu_s"] = eager_fit(a.eager_gelu)
        c["eager_outer_gelu_s"] = max(0.0, c["eager_outer_gelu_s"])
        measured.append("eager GELU")
    eager = c["eager_layer_swiglu_s"] * L

    def scale(keys, ratio):
        for k in keys:
            c[k] = DEFAULT[k] * ratio

    ds = {1: a.ds_z1, 2: a.ds_z2}
    for z, f in ds.items():
        if f:
            r = result(f)
            c[f"deepspeed_z{z}_tensor_s"] = max(0.0, r["median_mb_host_s"] - eager) / T
            c["deepspeed_z12_tail_tensor_s"] = r["median_tail_host_s"] / T
            measured.append(f"DeepSpeed ZeRO-{z}")
    for z, other in ((1, 2), (2, 1)):
        if not ds[z] and ds[other]:
            k = f"deepspeed_z{other}_tensor_s"
            scale([f"deepspeed_z{z}_tensor_s"], c[k] / DEFAULT[k])
    if a.ds_z3:
        r = result(a.ds_z3)
        per_pass = max(0.0, r["median_mb_host_s"] - eager) / 2
        k = per_pass / (DEFAULT["deepspeed_z3_module_pass_s"] * M + DEFAULT["deepspeed_z3_tensor_pass_s"] * T)
        scale(["deepspeed_z3_module_pass_s", "deepspeed_z3_tensor_pass_s"], k)
        c["deepspeed_z3_tail_tensor_s"] = r["median_tail_host_s"] / T
        measured.append("DeepSpeed ZeRO-3")
    fs = {2: a.fsdp_z2, 3: a.fsdp_z3}
    for z, f in fs.items():
        if f:
            r = result(f)
            c[f"fsdp_z{z}_tensor_s"] = max(0.0, r["median_mb_host_s"] - eager) / T
            c[f"fsdp_z{z}_tail_tensor_s"] = r["median_tail_host_s"] / T
            measured.append(f"FSDP2 zero {z}")
    for z, other in ((2, 3), (3, 2)):
        if not fs[z] and fs[other]:
            ratio = c[f"fsdp_z{other}_tensor_s"] / DEFAULT[f"fsdp_z{other}_tensor_s"]
            scale([f"fsdp_z{z}_tensor_s", f"fsdp_z{z}_tail_tensor_s"], ratio)
    if a.fsdp_z2 or a.fsdp_z3:
        z = 3 if a.fsdp_z3 else 2
        ratio = c[f"fsdp_z{z}_tensor_s"] / DEFAULT[f"fsdp_z{z}_tensor_s"]
        scale([k for k in DEFAULT if k.startswith("dtensor_")], ratio)
    if a.megatron:
        r = result(a.megatron)
        gas = r["global_batch"] // (r["mbs"] * r["dp"])
        k = r["median_host_step_s"] / (gas * L * DEFAULT["megatron_layer_s"] + DEFAULT["megatron_tail_s"])
        scale(["megatron_layer_s", "megatron_tail_s"], k)
        measured.append(f"Megatron (gas {gas})")
    prof = json.load(open(a.base)) if a.base else {"format": "planner-profile"}
    src = "engine host probe" + (f" on {a.source}" if a.source else "") + ": measured " + ", ".join(measured)
    src += f"; tiny model {m.get('name')} ({L} layers, {T} tensors, {M} submodules); the rest compiled-in (probe6)"
    prof["engine_host"] = dict(source=src, **c)
    with open(a.output, "w") as f:
        json.dump(prof, f, indent=1)
        f.write("\n")
    print(json.dumps(prof["engine_host"], indent=1))


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:  # a missing or malformed input file
        fail(f"{type(e).__name__}: {e}")
