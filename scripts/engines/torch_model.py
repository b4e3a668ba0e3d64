"""A decoder transformer (GPT-2/GPT-NeoX/Llama family) in plain torch.nn, built
from a planner model spec (the "model" object of a plan file or of
`planner export --to fsdp`), for the engines' training scripts in this folder
(deepspeed_train.py, fsdp_train.py). Megatron builds its own GPTModel.

Module names are the ones `planner export --to fsdp` names in its
tensor-parallel plan: embedding, layers.N.{attention_norm, attention.{q,k,v,out},
mlp_norm, mlp.{up,gate,down}}, norm, lm_head. The attention reads its local
head count from q's weight, so the same code runs whole or column-sharded
(torch.distributed.tensor.parallel hands it local tensors).

Also: the shared timing/result helpers (one machine-readable line per run).
"""
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """Zhang & Sennrich 2019: x / rms(x) * w."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def norm_of(spec, dim):
    return RMSNorm(dim) if spec["norm"] == "rmsnorm" else nn.LayerNorm(dim, eps=1e-5)


def rotary(x, base):
    """Rotary embedding (Su et al. 2021), half-split layout as GPT-NeoX/Llama: x [b, heads, s, d]."""
    s, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(s, device=x.device, dtype=torch.float32), inv)
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, spec):
        super().__init__()
        h, heads, kv = spec["hidden"], spec["heads"], spec.get("kv_heads") or spec["heads"]
        self.head_dim = h // heads
        self.group = heads // kv
        self.rope_base = float(spec.get("rope_theta") or 10000.0) if spec["pos"] == "rotary" else 0.0
        self.q = nn.Linear(h, heads * self.head_dim, bias=spec["qkv_bias"])
        self.k = nn.Linear(h, kv * self.head_dim, bias=spec["qkv_bias"])
        self.v = nn.Linear(h, kv * self.head_dim, bias=spec["qkv_bias"])
        self.out = nn.Linear(heads * self.head_dim, h, bias=spec["out_bias"])

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        q = self.q(x).view(b, s, -1, self.head_dim).transpose(1, 2)  # local heads under TP
        k = self.k(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        if self.rope_base:
            q, k = rotary(q, self.rope_base), rotary(k, self.rope_base)
        if self.group > 1:
            k = k.repeat_interleave(self.group, dim=1)
            v = v.repeat_interleave(self.group, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, s, -1))


class Mlp(nn.Module):
    def __init__(self, spec):
        super().__init__()
        h, f, bias = spec["hidden"], spec["ffn"], spec["mlp_bias"]
        self.swiglu = spec["mlp"] == "swiglu"
        self.up = nn.Linear(h, f, bias=bias)
        self.gate = nn.Linear(h, f, bias=bias) if self.swiglu else None
        self.down = nn.Linear(f, h, bias=bias)

    def forward(self, x):
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.attention_norm = norm_of(spec, spec["hidden"])
        self.attention = Attention(spec)
        self.mlp_norm = norm_of(spec, spec["hidden"])
        self.mlp = Mlp(spec)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Embedding(nn.Embedding):
    """nn.Embedding drawn from N(0, 0.02) (GPT-2's and Llama's initialisation) instead of torch's N(0, 1):
    with tied embeddings N(0, 1) makes the first logits' scale ~sqrt(hidden) and the loss ~170 at
    llama-3.2-1b (validation/engines/h100x4). reset_parameters runs inside the constructor, so this
    holds under DeepSpeed's zero.Init too, which partitions a module's parameters after it."""

    def reset_parameters(self):
        nn.init.normal_(self.weight, mean=0.0, std=0.02)
        self._fill_padding_idx_with_zero()


class Decoder(nn.Module):
    """Token embedding (+ learned positions), blocks, final norm, output layer."""

    def __init__(self, spec, seq):
        super().__init__()
        if spec.get("arch", "decoder") != "decoder" or spec.get("parallel_block") or spec.get("moe"):
            raise ValueError(f"model {spec.get('name')}: only sequential dense decoders are built here")
        h = spec["hidden"]
        self.embedding = Embedding(spec["vocab"], h)
        self.positions = Embedding(max(seq, spec.get("max_positions") or seq), h) if spec["pos"] == "learned" else None
        self.layers = nn.ModuleList(Block(spec) for _ in range(spec["layers"]))
        self.norm = norm_of(spec, h)
        self.lm_head = nn.Linear(h, spec["vocab"], bias=spec.get("lm_head_bias", False))
        self.cfg_tied = bool(spec.get("tied_embeddings"))
        if self.cfg_tied:
            self.lm_head.weight = self.embedding.weight
        self.seq_shard_rank = 0  # this rank's index along a sequence-sharded residual stream (TP with sp)
        self.checkpoint = None  # set by the trainer: a function (block, x) -> x that recomputes

    def forward(self, tokens):
        x = self.embedding(tokens)
        if self.positions is not None:
            # Under sequence parallelism the embedding's output holds this rank's slice of the sequence
            # (Shard(1)); its positions are that slice's (seq_shard_rank, set by the trainer).
            first = self.seq_shard_rank * x.shape[1] if x.shape[1] != tokens.shape[1] else 0
            x = x + self.positions(torch.arange(first, first + x.shape[1], device=tokens.device))
        for blk in self.layers:
            x = self.checkpoint(blk, x) if self.checkpoint else blk(x)
        return self.lm_head(self.norm(x))


def lm_loss(logits, labels):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def batch(vocab, mbs, seq, device, gen):
    """Synthetic tokens (every engine trains on random tokens here: step time and memory do not depend on them)."""
    t = torch.randint(0, vocab, (mbs, seq + 1), generator=gen).to(device)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def steps_from_env(default_steps=10, default_warmup=3):
    """PLANNER_ENGINE_STEPS / PLANNER_ENGINE_WARMUP: optimizer steps timed and untimed (the launch line stays as exported)."""
    return int(os.environ.get("PLANNER_ENGINE_STEPS", default_steps)), int(os.environ.get("PLANNER_ENGINE_WARMUP", default_warmup))


class StepTimer:
    """Wall time per optimizer step (after a device sync) and the peak of torch.cuda.max_memory_allocated.

    Also the host's own time: `mark()` after each micro-batch's backward, and `stop()` reads the clock
    before its sync, so each step has the host's seconds per micro-batch (start or the previous mark to
    the mark) and its tail (the last mark to the end of the step's enqueueing: the optimizer, the
    engine's step bookkeeping). Where the GPU is the bottleneck these include the host's waits on a
    full launch queue and on the engine's own syncs (DeepSpeed's host time equals its wall time); on a model too small to keep the GPU busy they are the host's work alone
    (the engines' host probe, docs/ENGINE_TIME.md)."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.times = []
        self.host_times = []
        self.mb_host = []  # per step: host seconds of each micro-batch
        self.tail_host = []  # per step: host seconds after the last micro-batch
        self.t0 = None
        self.marks = []

    def start(self):
        if self.cuda:
            torch.cuda.synchronize()
        self.t0 = time.perf_counter()
        self.marks = []

    def mark(self):
        self.marks.append(time.perf_counter())

    def stop(self):
        host = time.perf_counter()
        if self.cuda:
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - self.t0)
        self.host_times.append(host - self.t0)
        edges = [self.t0] + self.marks
        self.mb_host.append([b - a for a, b in zip(edges, edges[1:])])
        self.tail_host.append(host - edges[-1] if self.marks else None)
        return self.times[-1]


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def report(engine, timer, warmup, tokens_per_step, extra=None):
    """Rank 0 prints one line `ENGINE_RESULT {json}` (and writes it to $PLANNER_ENGINE_RESULT): the step times
    after warm-up, their median, and the peak allocated bytes, the maximum over ranks."""
    import torch.distributed as dist
    cuda = timer.cuda
    peak = torch.tensor([float(torch.cuda.max_memory_allocated()) if cuda else 0.0],
                        device="cuda" if cuda else "cpu")
    reserved = torch.tensor([float(torch.cuda.max_memory_reserved()) if cuda else 0.0],
                            device="cuda" if cuda else "cpu")
    if dist.is_initialized():
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        dist.all_reduce(reserved, op=dist.ReduceOp.MAX)
    timed = timer.times[warmup:] or timer.times
    med = sorted(timed)[len(timed) // 2] if timed else math.nan
    res = {"engine": engine, "steps": len(timer.times), "warmup": warmup, "step_s": timed, "median_step_s": med,
           "mean_step_s": sum(timed) / len(timed) if timed else math.nan,
           "tokens_per_s": tokens_per_step / med if timed and med > 0 else math.nan,
           "peak_allocated_bytes": int(peak.item()), "peak_reserved_bytes": int(reserved.item()),
           "world_size": dist.get_world_size() if dist.is_initialized() else 1,
           "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
           # The host's side of rank 0's steps (StepTimer): until the step's last enqueue, per micro-batch
           # (the median over the timed steps' micro-batches) and after the last micro-batch.
           "host_step_s": timer.host_times[warmup:] or timer.host_times,
           "median_host_step_s": median(timer.host_times[warmup:] or timer.host_times),
           "median_mb_host_s": median([x for mbs in (timer.mb_host[warmup:] or timer.mb_host) for x in mbs]),
           "median_tail_host_s": median(timer.tail_host[warmup:] or timer.tail_host)}
    res.update(extra or {})
    if not dist.is_initialized() or dist.get_rank() == 0:
        line = json.dumps(res)
        print("ENGINE_RESULT " + line, flush=True)
        path = os.environ.get("PLANNER_ENGINE_RESULT")
        if path:
            with open(path + ".tmp", "w") as f:
                f.write(line + "\n")
            os.replace(path + ".tmp", path)
    return res


def probe(spec, seq, mbs, device):
    """Activation memory of this model in eager bf16, measured: what the engines' trainers keep for one
    micro-batch (issue 33: the activation model per engine, by measurement). Forward block by block,
    recording per block the bytes that autograd saves (saved_tensors_hooks, parameters excluded; distinct
    storages) and, on CUDA, torch.cuda.memory_allocated's growth; then the head and the loss; then the
    backward's peak above what was allocated before it (parameter gradients included: grad_bytes)."""
    torch.manual_seed(0)
    model = Decoder(spec, seq).to(device=device, dtype=torch.bfloat16)
    cuda = device != "cpu"
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    saved = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            saved[st.data_ptr()] = st.nbytes()
        return t

    def alloc():
        if cuda:
            torch.cuda.synchronize()
            return torch.cuda.memory_allocated()
        return 0

    tokens, labels = batch(spec["vocab"], mbs, seq, device, torch.Generator().manual_seed(0))
    out = {"model": spec.get("name"), "layers": spec["layers"], "seq": seq, "mbs": mbs, "device": str(device),
           "torch": torch.__version__, "param_bytes": param_bytes, "saved_per_layer": [], "alloc_per_layer": []}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        x = model.embedding(tokens)
        if model.positions is not None:
            x = x + model.positions(torch.arange(seq, device=device))
        for blk in model.layers:
            s0, a0 = sum(saved.values()), alloc()
            x = blk(x)
            out["saved_per_layer"].append(sum(saved.values()) - s0)
            out["alloc_per_layer"].append(alloc() - a0)
        s0, a0 = sum(saved.values()), alloc()
        logits = model.lm_head(model.norm(x))
        out["head_saved"], out["head_alloc"] = sum(saved.values()) - s0, alloc() - a0
        s0, a0 = sum(saved.values()), alloc()
        loss = lm_loss(logits, labels)
        out["loss_saved"], out["loss_alloc"] = sum(saved.values()) - s0, alloc() - a0
    del logits, x
    before = alloc()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
        out["backward_peak_above"] = torch.cuda.max_memory_allocated() - before
    out["grad_bytes"] = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    out["tokens"] = seq * mbs
    if cuda:
        # Time of a forward + backward (median of 5 after 2): the host's, until backward() returns
        # (enqueue), and the wall's, after a device sync; the engines' host terms are the gap.
        host, wall = [], []
        for i in range(7):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            lm_loss(model(tokens), labels).backward()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            if i >= 2:
                host.append(t1 - t0)
                wall.append(t2 - t0)
        out["fwd_bwd_host_s"], out["fwd_bwd_wall_s"] = sorted(host)[2], sorted(wall)[2]
    return out


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Measure this model's activation memory per micro-batch (see probe()).",
                                 epilog="example: python3 scripts/engines/torch_model.py --probe plan.json --mbs 1,2 --layers 4")
    ap.add_argument("--probe", required=True, metavar="PLAN", help="a plan file (its model and seq)")
    ap.add_argument("--mbs", default="1", help="micro-batch sizes, comma-separated")
    ap.add_argument("--layers", type=int, help="build this many layers instead of the model's (per-layer figures do not change)")
    ap.add_argument("--seq", type=int, help="sequence length (default: the plan's)")
    a = ap.parse_args()
    try:
        plan = json.load(open(a.probe))
    except (OSError, json.JSONDecodeError) as e:
        ap.exit(2, f"torch_model.py: {a.probe}: {e}\n")
    spec = dict(plan["model"], **({"layers": a.layers} if a.layers else {}))
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for m in a.mbs.split(","):
        print("PROBE " + json.dumps(probe(spec, a.seq or plan["seq"], int(m), dev)), flush=True)
        if dev == "cuda":
            torch.cuda.empty_cache()
