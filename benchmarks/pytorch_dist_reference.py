#!/usr/bin/env python3
"""Distributed PyTorch baselines for the data-parallel / ZeRO runtime of `planner exec`.

What it compares and why: the C++ runtime (runtime/, LibTorch) trains a plan with
data parallelism over dp = world size processes (one per GPU), optionally with
ZeRO. This script runs the same plan with PyTorch's own data-parallel engines, so
the C++ numbers (step time, tokens/s, peak memory, losses) can be put next to
what a PyTorch user would get:

  --mode ddp     torch.nn.parallel.DistributedDataParallel (ZeRO-0): default
                 25 MB buckets, gradient_as_bucket_view=True, no_sync() on the
                 inner micro-batches. Working-precision (bf16) parameters that
                 are views into one flat buffer (matrices first, as runtime/ and
                 pytorch_reference.py lay them out), bf16 gradients (DDP's bucket
                 views, all-reduced in bf16), fp32 master weights and Adam
                 moments in flat buffers, the global gradient norm clipped at 1.0
                 and torch._fused_adamw_ per <= 2^26-element chunk with the clip
                 divisor as grad_scale, then master -> bf16 copy: the optimizer
                 of pytorch_reference.py, unchanged.
  --mode fsdp2   torch.distributed.fsdp.fully_shard (FSDP2) on every transformer
                 layer and on the root (embeddings, final norm, head); fp32
                 sharded parameters, MixedPrecisionPolicy(param_dtype=bf16,
                 reduce_dtype=--reduce-dtype, default bf16 like the C++ runtime's
                 bf16 gradient buffer); torch.optim.AdamW(fused=True) on the fp32
                 shards (weight decay on matrices only), clip_grad_norm_(1.0).
                 --reshard-after-forward 1 = ZeRO-3 like (parameters re-gathered
                 for the backward), 0 = ZeRO-2 like (kept gathered from forward
                 to backward).

The model, its initial weights, the tokens and the loss are those of
benchmarks/pytorch_reference.py (imported as `ref`): the same decoder families,
fused qkv and gate/up matrices, the same seeded normal_ init on the flat fp32
buffer, the same splitmix64 token generator, the same chunked cross-entropy and
the head padded to a multiple of 64 rows. Two things change, because DDP and
FSDP2 hook AccumulateGrad of real nn.Parameters: the parameters are registered
nn.Parameters of one nn.Module per layer plus a root module, and the linear layers
(ref.linear, replaced in this process) return their weight gradients to autograd
instead of accumulating them into the flat gradient buffer with addmm_(beta=1).
Full activation checkpointing is a non-reentrant torch.utils.checkpoint inside each
layer module (reentrant in ref), which is what FSDP2 supports.

Batches: global batch = dp * mbs * gas with dp = world size; rank r's
micro-batch i of step s holds the sequences that the single-process reference
with dp*gas micro-batches uses for micro-batch r*gas + i of step s, so the
losses match `pytorch_reference.py` on a plan with gas' = dp*gas (first step
equal to rounding; later steps differ by the reduction order). The tokens of
all steps are generated on the host before the first step (the single-process
reference generates them inside the step).

Launch (from the repository root; works under torchrun and under mpirun):
  torchrun --nproc_per_node 2 benchmarks/pytorch_dist_reference.py PLAN.json --mode ddp -o ddp.json
  torchrun --nproc_per_node 2 benchmarks/pytorch_dist_reference.py PLAN.json --mode fsdp2 \\
      --reshard-after-forward 1 -o fsdp2.json
  mpirun -np 2 python3 benchmarks/pytorch_dist_reference.py PLAN.json --mode ddp
  (CPU test: --device cpu, gloo backend.)
Options: --steps 10 --warmup 3 --seed 1234 --lr 3e-4 --grad-sync last|every
(last: no_sync / set_requires_gradient_sync(False) on the inner micro-batches;
every: reduce after every micro-batch's backward, as the C++ ZeRO-2/3 step
program does), --reduce-dtype bf16|fp32 (fsdp2).
Prints one summary line (rank 0) and writes a JSON document (-o; keys at the end
of main()): step times are the per-step maximum over ranks (CUDA events on the
GPU, wall clock on the CPU), losses the global mean per step (warm-up steps
included, as in pytorch_reference.py), peak memory the maximum over ranks of
the timed steps.
"""
import os

# The device machine requires NVLink multicast off (NVLS in NCCL, symmetric memory).
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)

import argparse
import contextlib
import datetime
import json
import platform
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_reference as ref  # noqa: E402


# ---------------------------------------------------------------- model as nn.Modules
class Linear(torch.autograd.Function):
    """ref.LinearAccum's forward (head padded to a multiple of 64 rows, extra
    columns -inf); the backward returns dW and db to autograd (so DDP's and
    FSDP2's AccumulateGrad hooks see them) instead of accumulating in place."""

    @staticmethod
    def forward(ctx, x, w, b, padded_rows):
        rows, inn = w.shape
        out = max(rows, padded_rows)
        x2 = x.reshape(-1, inn)
        wp = F.pad(w, (0, 0, 0, out - rows)) if out > rows else w
        if b is not None:
            bp = F.pad(b, (0, out - rows)) if out > rows else b
            y = torch.addmm(bp, x2, wp.t())
        else:
            y = torch.mm(x2, wp.t())
        if out > rows:
            y[:, rows:].fill_(float("-inf"))
        ctx.save_for_backward(x, w)
        ctx.out, ctx.has_b = out, b is not None
        return y.view(*x.shape[:-1], out)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        rows, inn = w.shape
        out = ctx.out
        g2 = g.reshape(-1, out)
        x2 = x.reshape(-1, inn)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            wp = F.pad(w, (0, 0, 0, out - rows)) if out > rows else w
            gx = torch.mm(g2, wp).view(x.shape)
        if ctx.needs_input_grad[1]:
            gw = torch.mm(g2.t(), x2)[:rows] if out > rows else torch.mm(g2.t(), x2)
        if ctx.has_b and ctx.needs_input_grad[2]:
            gb = g2.sum(0)[:rows]
        return gx, gw, gb, None


# ref.Model's attention, mlp and loss call the module-level `linear`; in this
# process it is the autograd-friendly one above.
ref.linear = lambda x, w, b=None, padded_rows=0: Linear.apply(x, w, b, padded_rows)


class Core(ref.Model):
    """ref.Model whose parameters are looked up on the nn.Modules at call time
    (FSDP2 swaps sharded and gathered parameters on the module attributes) and
    whose layers are called through their modules (so DDP/FSDP2 hooks run)."""

    def p(self, i):
        if i is None:
            return None
        mod, name = self.where[i]
        return getattr(mod, name)

    def layer(self, i, x, selective=False):
        return self.blocks[i](x, selective)


class Block(nn.Module):
    def __init__(self, core, i, full_ckpt):
        super().__init__()
        self.core, self.i, self.full_ckpt = core, i, full_ckpt  # core is not an nn.Module: not registered

    def _layer(self, x, selective):
        return ref.Model.layer(self.core, self.i, x, selective)

    def forward(self, x, selective=False):
        if self.full_ckpt and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(self._layer, x, selective, use_reentrant=False)
        return self._layer(x, selective)


class Net(nn.Module):
    """Root module: the embeddings, final norm and head as its own parameters,
    one Block per transformer layer; forward returns the loss of one micro-batch."""

    def __init__(self, core, ckpt):
        super().__init__()
        object.__setattr__(self, "core", core)  # plain attribute, not a submodule
        self.blocks = nn.ModuleList(Block(core, i, ckpt == "full") for i in range(len(core.layers)))
        core.blocks = list(self.blocks)
        self.ckpt = "selective" if ckpt == "selective" else "none"  # "full" is done inside Block

    def forward(self, ids, labels, grad_hint):
        return self.core.loss(ids, labels, self.ckpt, grad_hint)


def build(m, seq, ckpt, dev, dtype, seed, flat_params):
    """The model with ref's initial weights. flat_params: nn.Parameters are views
    into the working-precision flat buffer (DDP); else fp32 copies (FSDP2 shards
    them). Returns (net, core, master fp32 flat buffer or None)."""
    core = Core(m, seq)
    master = core.materialize(dev, dtype, seed)  # fp32 flat init (or the fp32 flat buffer itself)
    P = core.P
    P.grad, P.tensors, core.t = None, None, None  # the flat gradient buffer is not used here
    net = Net(core, ckpt)
    core.where = [None] * len(P.infos)
    owner = {}
    for li, L in enumerate(core.layers):
        for key, idx in L.items():
            if idx is not None:
                owner[idx] = (net.blocks[li], key)
    for idx, (name, shape, _, n) in enumerate(P.infos):
        mod, attr = owner.get(idx, (net, name))
        o = P.offsets[idx]
        src = P.flat[o:o + n].view(shape) if flat_params else master[o:o + n].view(shape).clone()
        mod.register_parameter(attr, nn.Parameter(src))
        core.where[idx] = (mod, attr)
    if not flat_params:
        P.flat, master = None, None
    return net, core, master


# ---------------------------------------------------------------- launch
def world_from_env():
    """(rank, world, local_rank) from torchrun's variables, else Open MPI's, else
    MPICH/Hydra's; a single process when none is set."""
    env = os.environ
    for r, w, lr in (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                     ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                     ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")):
        if r in env and w in env:
            rank, world = int(env[r]), int(env[w])
            return rank, world, int(env.get(lr, rank))
    return 0, 1, 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--mode", choices=("ddp", "fsdp2"), required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reshard-after-forward", type=int, choices=(0, 1), default=1,
                    help="fsdp2: 1 = ZeRO-3 like, 0 = ZeRO-2 like")
    ap.add_argument("--reduce-dtype", choices=("bf16", "fp32"), default="bf16",
                    help="fsdp2 with a 16-bit plan: dtype of the gradient reduce-scatter (and of no-sync accumulation)")
    ap.add_argument("--grad-sync", choices=("last", "every"), default="last",
                    help="last: skip gradient sync on the inner micro-batches; every: reduce after each")
    ap.add_argument("-o", "--output")
    a = ap.parse_args()

    rank, world, local = world_from_env()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29571")
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                                timeout=datetime.timedelta(minutes=10))
        torch.set_float32_matmul_precision("high")
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(minutes=10))
    say = (lambda *s, **k: print(*s, **k)) if rank == 0 else (lambda *s, **k: None)

    plan = json.load(open(a.plan))
    m, st, seq = plan["model"], plan["strategy"], plan["seq"]
    if isinstance(st, str):  # the strategy's text form, "dp=2,tp=1,...,precision=bf16"
        st = {k: int(v) if v.isdigit() else v for k, v in (kv.split("=", 1) for kv in st.split(","))}
    if st.get("tp", 1) != 1 or st.get("pp", 1) != 1:
        raise SystemExit("data-parallel plans only (tp = pp = 1)")
    prec = st["precision"]
    if prec == "fp16":
        raise SystemExit("bf16 and fp32 only (fp16 loss scaling not implemented here)")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[prec]
    mixed = dtype != torch.float32
    mbs, gas, ckpt, dp = st["mbs"], st["gas"], st["ckpt"], world
    if st.get("dp", 1) != dp or plan.get("global_batch", dp * mbs * gas) != dp * mbs * gas:
        say(f"note: plan has dp={st.get('dp', 1)} global_batch={plan.get('global_batch')}; running dp={dp} "
            f"(world size) x mbs={mbs} x gas={gas} = global batch {dp * mbs * gas}", file=sys.stderr)
    lr, b1, b2, eps, wd, clip = a.lr, 0.9, 0.95, 1e-8, 0.1, 1.0

    ddp = a.mode == "ddp"
    net, core, master = build(m, seq, ckpt, dev, dtype, a.seed, flat_params=ddp)
    n, nd = core.P.numel, core.P.decay_numel

    if ddp:
        params = [getattr(mod, name) for mod, name in core.where]  # flat-layout (ref) order
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net, device_ids=[local] if cuda else None, gradient_as_bucket_view=True)
        offsets = core.P.offsets
        exp_avg = torch.zeros(n, device=dev)
        exp_avg_sq = torch.zeros(n, device=dev)
        step_t = torch.zeros((), device=dev)
        chunk = min(n, 1 << 26)
        work = torch.empty(chunk, device=dev)  # fp32 gradient chunk (DDP's gradients are not one flat buffer)
        order = sorted(range(len(params)), key=lambda i: offsets[i])
        pieces = []  # per chunk: (flat offset within the chunk, param index, lo, hi)
        for o in range(0, n, chunk):
            c, lst = min(chunk, n - o), []
            for i in order:
                s, e = offsets[i], offsets[i] + params[i].numel()
                lo, hi = max(s, o), min(e, o + c)
                if lo < hi:
                    lst.append((lo - o, i, lo - s, hi - s))
            pieces.append((o, c, lst))

        def opt_step(t):
            with torch.no_grad():
                grads = [p.grad for p in params]
                norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float32)))
                divisor = ((norm + 1e-6) / clip).clamp_min(1.0)
                step_t.fill_(float(t))
                for o, c, lst in pieces:
                    torch._foreach_copy_([work[w0:w0 + hi - lo] for w0, _, lo, hi in lst],
                                         [grads[i].reshape(-1)[lo:hi] for _, i, lo, hi in lst])
                    split = max(0, min(nd - o, c))
                    for lo, hi, w in ((0, split, wd), (split, c, 0.0)):
                        if hi > lo:
                            torch._fused_adamw_([master[o + lo:o + hi]], [work[lo:hi]], [exp_avg[o + lo:o + hi]],
                                                [exp_avg_sq[o + lo:o + hi]], [], [step_t], lr=lr, beta1=b1,
                                                beta2=b2, weight_decay=w, eps=eps, amsgrad=False, maximize=False,
                                                grad_scale=divisor)
                    if mixed:
                        core.P.flat[o:o + c].copy_(master[o:o + c])

        def zero_grad():
            g = [p.grad for p in params if p.grad is not None]
            if g:
                torch._foreach_zero_(g)

        def sync_ctx(sync):
            return contextlib.nullcontext() if sync else model.no_sync()
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh(dev.type, (world,))
        red = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.reduce_dtype] if mixed else None
        mp = MixedPrecisionPolicy(param_dtype=dtype if mixed else None, reduce_dtype=red)
        raf = bool(a.reshard_after_forward)
        for blk in net.blocks:
            fully_shard(blk, mesh=mesh, mp_policy=mp, reshard_after_forward=raf)
        fully_shard(net, mesh=mesh, mp_policy=mp, reshard_after_forward=raf)
        model = net
        params = list(net.parameters())
        groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": wd},
                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
        optim = torch.optim.AdamW(groups, lr=lr, betas=(b1, b2), eps=eps, fused=True)

        def opt_step(t):
            torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
            optim.step()

        def zero_grad():
            optim.zero_grad(set_to_none=True)

        def sync_ctx(sync):
            net.set_requires_gradient_sync(sync)
            return contextlib.nullcontext()

    if cuda:
        torch.cuda.empty_cache()

    # tokens of every step, generated before the first one
    tokens = ref.SyntheticTokens(m["vocab"], a.seed)
    total = a.warmup + a.steps
    host = [[torch.from_numpy(tokens.batch(s, rank * gas + i, mbs, seq)) for i in range(gas)] for s in range(total)]
    if cuda:
        host = [[h.pin_memory() for h in hs] for hs in host]

    def train_step(s):
        zero_grad()
        loss_sum = torch.zeros((), device=dev)
        for i in range(gas):
            d = host[s][i].to(dev, non_blocking=cuda)
            ids, labels = d[:, :seq], d[:, 1:]
            with sync_ctx(a.grad_sync == "every" or i == gas - 1):
                loss = model(ids, labels, 1.0 / gas)
                (loss * (1.0 / gas)).backward()
            loss_sum += loss.detach()
        opt_step(s + 1)
        return loss_sum / gas

    losses, times = ref.timed_steps(
        train_step, total, a.warmup, cuda,
        lambda s, l: say(f"{a.mode}: warm-up step {s + 1}/{total} rank-0 loss {l.item():.4f}", file=sys.stderr),
        before_timing=dist.barrier)

    # across ranks: global mean loss, slowest rank per step, largest peak memory
    lt = torch.stack(losses).float()
    dist.all_reduce(lt)
    losses = (lt / world).tolist()
    tt = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
    times = tt.tolist()
    if cuda:
        mem = torch.tensor([torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()],
                           dtype=torch.int64, device=dev)
        dist.all_reduce(mem, op=dist.ReduceOp.MAX)
        peak_alloc, peak_res = mem.tolist()
    else:
        peak_alloc = peak_res = None

    med = float(np.median(times))
    tokens_per_step = dp * mbs * gas * seq
    mflops = ref.model_flops(m, seq, tokens_per_step)
    g = plan.get("cluster", {}).get("gpu", {})
    peak = {"bf16": g.get("peak_bf16_TFLOPS", 0), "fp32": g.get("peak_fp32_TFLOPS", 0)}[prec] * 1e12
    res = {
        "impl": f"pytorch-{a.mode}",
        "mode": a.mode,
        "world": world,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(dev) if cuda else platform.processor(),
        "backend": dist.get_backend(),
        "plan": a.plan,
        "model": m["name"],
        "params": n,
        "precision": prec,
        "dp": dp, "mbs": mbs, "gas": gas, "seq": seq, "ckpt": ckpt,
        "global_batch": dp * mbs * gas,
        "grad_sync": a.grad_sync,
        "reshard_after_forward": None if ddp else bool(a.reshard_after_forward),
        "reduce_dtype": prec if ddp else (a.reduce_dtype if mixed else "fp32"),
        "steps": a.steps, "warmup": a.warmup,
        "step_seconds": {"median": med, "min": min(times), "max": max(times), "all": times},
        "tokens_per_second": tokens_per_step / med,
        "samples_per_second": dp * mbs * gas / med,
        "model_tflops": mflops / med / 1e12,
        "mfu": (mflops / med / (peak * world)) if (cuda and peak > 0) else None,
        "losses": losses,
        "peak_allocated_bytes": peak_alloc,
        "peak_reserved_bytes": peak_res,
    }
    extra = "" if ddp else f" reshard_after_forward={a.reshard_after_forward} reduce={res['reduce_dtype']}"
    say(f"{a.mode} x{world}{extra} {m['name']} {prec} mbs={mbs} gas={gas} seq={seq}: step {med:.4f} s, "
        f"{res['tokens_per_second']:.0f} tok/s, {res['model_tflops']:.1f} TFLOP/s, "
        f"MFU {res['mfu'] * 100 if res['mfu'] else float('nan'):.1f}%, loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
        f"peak alloc {(peak_alloc or 0) / 2**30:.2f} GiB (max over ranks)")
    if a.output and rank == 0:
        with open(a.output, "w") as f:
            json.dump(res, f, indent=2)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
