#!/usr/bin/env python3
"""Train a plan with PyTorch as `planner export --to fsdp` writes it:

  torchrun --nproc-per-node 4 scripts/engines/fsdp_train.py --fsdp-config fsdp_config.json

Everything comes from the exported JSON (format planner-fsdp): the model
("model", built by torch_model.Decoder), the device mesh, DDP /
ZeroRedundancyOptimizer (zero_stage 0/1) or FSDP2 fully_shard per block then
the root (zero_stage 2/3: reshard_after_forward, MixedPrecisionPolicy,
CPUOffloadPolicy), the tensor-parallel plan (its style strings are evaluated
against torch.distributed.tensor.parallel's classes and applied by module
name), activation checkpointing, the optimizer and the batch. Synthetic tokens.

Timing: PLANNER_ENGINE_STEPS optimizer steps (default 10), the first
PLANNER_ENGINE_WARMUP (default 3) untimed; rank 0 prints `ENGINE_RESULT {json}`
and writes it to $PLANNER_ENGINE_RESULT when set. Without CUDA it runs on CPU
over gloo (a check of the wiring).
"""
import argparse
import json
import os
import sys
from contextlib import nullcontext

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def tp_styles(plan_styles):
    """The export's style strings as objects: each is a constructor call over the classes named here."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)
    names = {"Replicate": Replicate, "Shard": Shard, "ColwiseParallel": ColwiseParallel,
             "RowwiseParallel": RowwiseParallel, "SequenceParallel": SequenceParallel,
             "PrepareModuleInput": PrepareModuleInput}
    return {k: eval(v, {"__builtins__": {}}, names) for k, v in plan_styles.items()}  # noqa: S307 (our own export)


def apply_tp(model, tp_mesh, plan_styles):
    """The export's plan keys (embedding, norms, attention, attention.q/k/v, attention.out, mlp, mlp.up/gate,
    mlp.down, lm_head) mapped onto this model's module names."""
    from torch.distributed.tensor.parallel import parallelize_module
    st = tp_styles(plan_styles)
    top = {}
    if "embedding" in st:
        top["embedding"] = st["embedding"]
    if "lm_head" in st:
        top["lm_head"] = st["lm_head"]
    if "norms" in st:
        top["norm"] = st["norms"]
    parallelize_module(model, tp_mesh, top)
    if model.cfg_tied and "embedding" in top and "lm_head" in top:
        # Each style made its own DTensor of the one tied matrix; both shard the vocabulary rows (Shard(0)) on
        # the same mesh, so the output layer takes the embedding's again (else the tie is lost, and its memory doubles).
        model.lm_head.weight = model.embedding.weight
    model.seq_shard_rank = tp_mesh.get_local_rank()
    for blk in model.layers:
        p = {}
        if "norms" in st:
            p["attention_norm"] = st["norms"]
            p["mlp_norm"] = st["norms"]
        for key, mods in (("attention", ["attention"]), ("attention.q/k/v", ["attention.q", "attention.k", "attention.v"]),
                          ("attention.out", ["attention.out"]), ("mlp", ["mlp"]),
                          ("mlp.up/gate", ["mlp.up", "mlp.gate"] if blk.mlp.swiglu else ["mlp.up"]),
                          ("mlp.down", ["mlp.down"])):
            if key in st:
                for m in mods:
                    p[m] = st[key]
        parallelize_module(blk, tp_mesh, p)


def clip_grads(params, max_norm):
    """Global gradient-norm clipping over a mix of DTensor (TP/FSDP) and plain gradients, which
    torch.nn.utils.clip_grad_norm_'s foreach path refuses: each DTensor's norm is reduced over its own mesh."""
    from torch.distributed.tensor import DTensor
    grads = [p.grad for p in params if p.grad is not None]
    sq = None
    for g in grads:
        n = g.norm(dtype=torch.float32)
        n = n.full_tensor() if isinstance(n, DTensor) else n
        sq = n * n if sq is None else sq + n * n
    if sq is None:
        return 0.0
    coef = (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.to(g.device))
    return sq.sqrt()


def build(cfg, device, cuda):
    from torch.distributed.device_mesh import init_device_mesh
    mesh_cfg = cfg["device_mesh"]
    mesh = init_device_mesh("cuda" if cuda else "cpu", tuple(mesh_cfg["shape"]), mesh_dim_names=tuple(mesh_cfg["dim_names"]))
    dp_mesh = mesh["dp"]
    # Made where it trains (the whole model was moved there before sharding anyway, so the peak is the same):
    # initialising 1-3B parameters on the CPU with torchrun's one thread per process took seconds of each launch.
    with torch.device(device):
        model = torch_model.Decoder(cfg["model"], cfg["seq_length"])
    tp = cfg.get("tensor_parallel")
    if tp:
        apply_tp(model, mesh["tp"], tp["parallelize_module_plan"])
    ck = cfg.get("activation_checkpointing", "none")
    if ck == "full":
        from torch.utils.checkpoint import checkpoint
        model.checkpoint = lambda blk, x: checkpoint(blk, x, use_reentrant=False)
    elif ck == "selective":
        raise SystemExit("fsdp_train: selective checkpointing (the attention core only) is not built here")
    o = cfg["optimizer"]
    opt_kw = dict(lr=o["lr"], betas=tuple(o["betas"]), weight_decay=o["weight_decay"])
    autocast = None
    if cfg["zero_stage"] >= 2:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        fs = cfg["fully_shard"]
        kw = {"mesh": dp_mesh, "reshard_after_forward": fs["reshard_after_forward"]}
        if fs.get("mp_policy"):
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=DTYPES[fs["mp_policy"]["param_dtype"]],
                                                   reduce_dtype=DTYPES[fs["mp_policy"]["reduce_dtype"]])
        if fs.get("offload_policy"):
            kw["offload_policy"] = CPUOffloadPolicy(pin_memory=fs["offload_policy"].get("pin_memory", True))
        for blk in model.layers:
            fully_shard(blk, **kw)
        fully_shard(model, **kw)
        opt = torch.optim.AdamW(model.parameters(), fused=bool(o.get("fused")) and cuda and not fs.get("offload_policy"),
                                **opt_kw)
        wrapped = model
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = cfg.get("ddp", {})
        dp = mesh_cfg["shape"][0]
        if tp and dp > 1:
            raise SystemExit("fsdp_train: DistributedDataParallel does not take tensor-parallel (DTensor) weights; "
                             "export the plan with zero=2 or 3 (fully_shard over the dp mesh) instead")
        wrapped = model if tp else DDP(model, process_group=dp_mesh.get_group(), device_ids=[device.index] if cuda else None,
                      gradient_as_bucket_view=ddp.get("gradient_as_bucket_view", True),
                      bucket_cap_mb=ddp.get("bucket_cap_mb", 25))
        if cfg["zero_stage"] == 1 and not tp:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                          process_group=dp_mesh.get_group(), **opt_kw)
        else:
            opt = torch.optim.AdamW(model.parameters(), fused=bool(o.get("fused")) and cuda, **opt_kw)
        if cfg.get("autocast"):
            autocast = DTYPES[cfg["autocast"]["dtype"]]
    return mesh, wrapped, opt, autocast


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fsdp-config", required=True, help="the JSON `planner export --to fsdp` wrote")
    a = ap.parse_args()
    try:
        cfg = json.load(open(a.fsdp_config))
    except (OSError, json.JSONDecodeError) as e:
        print(f"fsdp_train: {e}", file=sys.stderr)
        return 2
    if cfg.get("format") != "planner-fsdp" or "model" not in cfg:
        print(f"fsdp_train: {a.fsdp_config} is not a planner-fsdp export with a \"model\" (re-export it)", file=sys.stderr)
        return 2
    if cfg.get("grad_scaler"):
        print("fsdp_train: fp16 with a gradient scaler is not wired here; export a bf16 plan", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    if dist.get_world_size() != cfg["world_size"]:
        print(f"fsdp_train: the export is for {cfg['world_size']} ranks; launched with {dist.get_world_size()}",
              file=sys.stderr)
        return 2
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    torch.manual_seed(1234)  # the same weights on every rank (TP shards them, DDP checks them)
    mesh, model, opt, autocast = build(cfg, device, cuda)
    mbs, gas, seq = cfg["micro_batch_size"], cfg["gradient_accumulation_steps"], cfg["seq_length"]
    vocab = cfg["model"]["vocab"]
    dp_rank = mesh["dp"].get_local_rank()
    gen = torch.Generator().manual_seed(1000 + dp_rank)  # tp ranks of one dp rank see the same tokens
    steps, warmup = torch_model.steps_from_env()
    timer = torch_model.StepTimer(cuda)
    loss = None
    for _ in range(steps):
        timer.start()
        for i in range(gas):
            x, y = torch_model.batch(vocab, mbs, seq, device, gen)
            last = i == gas - 1
            sync = nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
            if cfg["zero_stage"] >= 2 and hasattr(model, "set_requires_gradient_sync"):
                model.set_requires_gradient_sync(last)
            with sync, (torch.autocast(device.type, dtype=autocast) if autocast else nullcontext()):
                loss = torch_model.lm_loss(model(x), y) / gas
                loss.backward()
            timer.mark()
        clip_grads(list(model.parameters()), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = timer.stop()
        if dist.get_rank() == 0:
            print(f"step {len(timer.times)} loss {loss.item() * gas:.4f} time {dt:.4f} s", flush=True)
    dp = cfg["device_mesh"]["shape"][0]
    torch_model.report("fsdp", timer, warmup, mbs * gas * seq * dp,
                       {"zero_stage": cfg["zero_stage"], "mesh": cfg["device_mesh"], "mbs": mbs, "gas": gas, "seq": seq,
                        "final_loss": float(loss.item() * gas),
                        "params": sum(p.numel() for p in model.parameters())})  # global counts (DTensor), tied once
    # Every rank's collectives done before the group goes: without it a rank of
    # the gloo test run now and then aborted (SIGABRT) in teardown after its
    # result (3 of 11 runs here; 0 of 8 with the barrier).
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
