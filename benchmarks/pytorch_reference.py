#!/usr/bin/env python3
"""PyTorch eager reference for `planner exec`: the same model, step and precision
layout as runtime/ (LibTorch C++), written in Python, to be run side by side on
the same GPU (validation/suites/h100_bench.json).

Same as the C++ runtime, on purpose:
  - the model built from the plan's ModelSpec (decoder families: learned or rotary
    positions, GELU/ReLU/SwiGLU, LayerNorm/RMSNorm, tied or untied head, GPT-J
    parallel block, OPT project_in/out; multi-head or grouped-query attention via
    F.scaled_dot_product_attention), fused qkv and gate/up matrices;
  - every parameter a view into one flat working-precision buffer, every gradient a
    view into one flat gradient buffer, matrices first (weight decay range);
  - the initial weights: torch.manual_seed(seed), then normal_ on the fp32 flat
    buffer in the same order as runtime/model/transformer.cpp (so the weights are identical to
    the C++ run's on the same device, and the losses agree);
  - the tokens: the same splitmix64 Markov generator as runtime/data.cpp;
  - the loss: the same chunked cross-entropy (gradient of the logits computed in
    the forward, kept in the working precision);
  - the optimizer: fp32 master + moments, torch._fused_adamw_ per <= 2^26-element
    chunk of the flat buffers with the clip factor as grad_scale, constant lr.
So the comparison measures the language (Python dispatch vs C++), not the algorithm,
against the runtime's ATen path (PLANNER_FUSED_KERNELS=0): on a GPU the runtime
itself fuses rotary, SwiGLU and the loss into its own kernels
(runtime/model/fused_ops.hpp), which this eager reference does not.

--compile runs the way a PyTorch user would let the compiler have it instead:
plain F.linear layers (autograd's own weight gradients, accumulated into the
same flat gradient buffer), F.cross_entropy over the logits in fp32, the
LM head still padded to a multiple of 64 rows, and the whole forward and loss
under torch.compile (default mode; the backward is compiled with it); the
optimizer step is the same. Its compilation happens in the warm-up steps.

Usage: pytorch_reference.py PLAN.json [--steps 10] [--warmup 3] [--compile] [-o out.json]
Prints one summary line and writes a JSON document (see the keys at the end).
"""
import argparse
import json
import math
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------- tokens
def splitmix64_scalar(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def stream_seed(seed, step, micro, row):
    s = seed
    s, a = splitmix64_scalar(s)
    a ^= step
    a, b = splitmix64_scalar(a)
    b ^= micro
    b, c = splitmix64_scalar(b)
    c ^= row
    c, out = splitmix64_scalar(c)
    return out


class SyntheticTokens:
    """runtime/data.cpp SyntheticTokens, vectorised over rows with numpy uint64."""

    def __init__(self, vocab, seed):
        self.vocab, self.seed = vocab, seed
        succ = list(range(vocab))
        s = seed ^ 0x5EED
        for i in range(vocab - 1, 0, -1):
            s, x = splitmix64_scalar(s)
            j = x % (i + 1)
            succ[i], succ[j] = succ[j], succ[i]
        self.succ = np.array(succ, dtype=np.int64)

    def batch(self, step, micro, rows, seq):
        with np.errstate(over="ignore"):
            st = np.array([stream_seed(self.seed, step, micro, r) for r in range(rows)], dtype=np.uint64)
            out = np.empty((rows, seq + 1), dtype=np.int64)
            v = np.uint64(self.vocab)

            def nxt():
                nonlocal st
                st = st + np.uint64(0x9E3779B97F4A7C15)
                z = st.copy()
                z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                return z ^ (z >> np.uint64(31))

            tok = (nxt() % v).astype(np.int64)
            out[:, 0] = tok
            for i in range(1, seq + 1):
                x = nxt()
                follow = (x & np.uint64(3)) != 0
                tok = np.where(follow, self.succ[tok], ((x >> np.uint64(2)) % v).astype(np.int64))
                out[:, i] = tok
        return out


# ---------------------------------------------------------------- model
class Params:
    """Flat buffers; declaration order, matrices first (runtime/model/transformer.cpp ParamStore)."""

    def __init__(self):
        self.infos = []  # name, shape, init, numel

    def add(self, name, shape, init):
        self.infos.append((name, tuple(shape), init, math.prod(shape)))
        return len(self.infos) - 1

    def materialize(self, device, dtype, seed, layers):
        off, self.offsets = 0, [0] * len(self.infos)
        for decayed in (True, False):
            for i, (_, shape, _, n) in enumerate(self.infos):
                if (len(shape) >= 2) == decayed:
                    self.offsets[i] = off
                    off += n
            if decayed:
                self.decay_numel = off
        self.numel = off
        self.flat = torch.zeros(self.numel, device=device, dtype=dtype)
        self.grad = torch.zeros(self.numel, device=device, dtype=dtype)
        init = torch.empty(self.numel, device=device, dtype=torch.float32)
        torch.manual_seed(seed)
        std_out = 0.02 / math.sqrt(2.0 * max(1, layers))
        for i, (_, shape, kind, n) in enumerate(self.infos):
            t = init[self.offsets[i]:self.offsets[i] + n]
            if kind == "normal":
                t.normal_(0.0, 0.02)
            elif kind == "out":
                t.normal_(0.0, std_out)
            elif kind == "zeros":
                t.zero_()
            else:
                t.fill_(1.0)
        self.flat.copy_(init)
        self.tensors = []
        for i, (_, shape, _, n) in enumerate(self.infos):
            o = self.offsets[i]
            p = self.flat[o:o + n].view(shape).detach().requires_grad_(True)
            p.grad = self.grad[o:o + n].view(shape)
            self.tensors.append(p)
        return init if dtype != torch.float32 else self.flat


class ChunkedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, chunk_rows, grad_hint=1.0):
        n = logits.shape[0]
        grad = torch.empty_like(logits)
        valid_all = labels.ne(-100)
        count = valid_all.sum().clamp_min(1).float()
        loss_sum = torch.zeros((), device=logits.device, dtype=torch.float32)
        for r0 in range(0, n, chunk_rows):
            c = min(chunk_rows, n - r0)
            valid = valid_all[r0:r0 + c]
            validf = valid.float().unsqueeze(1)
            target = torch.where(valid, labels[r0:r0 + c], 0).unsqueeze(1)
            lp = torch.log_softmax(logits[r0:r0 + c], 1, dtype=torch.float32)
            loss_sum.sub_((lp.gather(1, target) * validf).sum())
            lp.exp_()
            lp.scatter_add_(1, target, -validf)
            lp.mul_(validf * (grad_hint / count))
            grad[r0:r0 + c].copy_(lp)
        ctx.save_for_backward(grad)
        ctx.hint = grad_hint
        return loss_sum / count

    @staticmethod
    def backward(ctx, g):
        (grad,) = ctx.saved_tensors
        grad.mul_((g / ctx.hint).to(grad.dtype))
        return grad, None, None, None


class LinearAccum(torch.autograd.Function):
    """runtime/model/transformer.cpp LinearAccum: dW, db accumulated into the flat gradient
    buffer's views (addmm_ with beta=1); LM head on a weight copy padded to a
    multiple of 64 rows, extra output columns -inf."""

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
        ctx.out, ctx.b = out, b
        return y.view(*x.shape[:-1], out)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        rows, inn = w.shape
        out = ctx.out
        g2 = g.reshape(-1, out)
        x2 = x.reshape(-1, inn)
        gx = None
        if ctx.needs_input_grad[0]:
            wp = F.pad(w, (0, 0, 0, out - rows)) if out > rows else w
            gx = torch.mm(g2, wp).view(x.shape)
        if out > rows:
            w.grad.add_(torch.mm(g2.t(), x2)[:rows])
        else:
            w.grad.addmm_(g2.t(), x2)
        if ctx.b is not None:
            ctx.b.grad.add_(g2.sum(0)[:rows])
        return gx, None, None, None


def linear(x, w, b=None, padded_rows=0):
    return LinearAccum.apply(x, w, b, padded_rows)


def plain_linear(x, w, b=None, padded_rows=0):
    rows = w.shape[0]
    if padded_rows > rows:  # the head: the GEMM on zero-padded rows, as LinearAccum
        w = F.pad(w, (0, 0, 0, padded_rows - rows))
        b = F.pad(b, (0, padded_rows - rows)) if b is not None else None
    return F.linear(x, w, b)


class AttnCoreCheckpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, gqa):
        ctx.save_for_backward(q, k, v)
        ctx.causal, ctx.gqa = causal, gqa
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    @staticmethod
    def backward(ctx, g):
        q, k, v = (t.detach().requires_grad_(True) for t in ctx.saved_tensors)
        with torch.enable_grad():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=ctx.causal, enable_gqa=ctx.gqa)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
        return dq, dk, dv, None, None


class Model:
    def __init__(self, m, seq):
        if m["arch"] != "decoder":
            raise SystemExit("pytorch_reference.py implements the decoder families only")
        self.m, self.seq = m, seq
        self.lin = linear  # plain_linear under --compile
        h, nh, nkv, f, V = m["hidden"], m["heads"], m["kv_heads"], m["ffn"], m["vocab"]
        # What this reference does not build is refused, not run as another model.
        unbuilt = [k for k in ("sandwich_norm", "gelu_gate", "logit_softcap", "embed_norm") if m.get(k)]
        if m.get("head_size", 0) not in (0, h // nh):
            unbuilt.append("head_size")
        if unbuilt:
            raise SystemExit("pytorch_reference.py does not build " + ", ".join(unbuilt))
        self.hd = h // nh
        kv = nkv * self.hd
        width = m["word_embed_dim"] if m.get("word_embed_dim", 0) > 0 else h
        ln = m["norm"] == "layernorm"
        P = self.P = Params()
        self.wte = P.add("wte", (V, width), "normal")
        self.wpe = P.add("wpe", (m["max_positions"] + m.get("position_offset", 0), h), "normal") if m["pos"] == "learned" else None
        self.proj_in = P.add("project_in", (h, width), "normal") if width != h else None
        self.layers = []
        for i in range(m["layers"]):
            L = {}
            L["n1w"] = P.add("n1w", (h,), "ones")
            L["n1b"] = P.add("n1b", (h,), "zeros") if ln else None
            if not m["parallel_block"]:
                L["n2w"] = P.add("n2w", (h,), "ones")
                L["n2b"] = P.add("n2b", (h,), "zeros") if ln else None
            L["qkv_w"] = P.add("qkv_w", (h + 2 * kv, h), "normal")
            L["qkv_b"] = P.add("qkv_b", (h + 2 * kv,), "zeros") if m["qkv_bias"] else None
            if m.get("qk_norm"):  # Qwen3: a norm of width head_dim over each q head and each k head
                L["qnw"] = P.add("q_norm_w", (self.hd,), "ones")
                L["qnb"] = P.add("q_norm_b", (self.hd,), "zeros") if ln else None
                L["knw"] = P.add("k_norm_w", (self.hd,), "ones")
                L["knb"] = P.add("k_norm_b", (self.hd,), "zeros") if ln else None
            L["o_w"] = P.add("o_w", (h, h), "out")
            L["o_b"] = P.add("o_b", (h,), "zeros") if m["out_bias"] else None
            up = 2 * f if m["mlp"] == "swiglu" else f
            L["fc1_w"] = P.add("fc1_w", (up, h), "normal")
            L["fc1_b"] = P.add("fc1_b", (up,), "zeros") if m["mlp_bias"] else None
            L["fc2_w"] = P.add("fc2_w", (h, f), "out")
            L["fc2_b"] = P.add("fc2_b", (h,), "zeros") if m["mlp_bias"] else None
            self.layers.append(L)
        self.fnw = P.add("fnw", (h,), "ones") if m["final_norm"] else None
        self.fnb = P.add("fnb", (h,), "zeros") if m["final_norm"] and ln else None
        self.proj_out = P.add("project_out", (width, h), "normal") if width != h else None
        self.head_w = P.add("lm_head", (V, width), "normal") if not m["tied_embeddings"] else None
        self.head_b = P.add("lm_head_b", (V,), "zeros") if m["lm_head_bias"] else None

    def materialize(self, device, dtype, seed):
        init = self.P.materialize(device, dtype, seed, self.m["layers"])
        self.t = self.P.tensors
        if self.m["pos"] == "rotary":
            d = self.hd
            base = float(self.m.get("rope_theta", 0) or 10000.0)  # 0 in a plan: 10000 (specs/model_spec.hpp)
            inv = 1.0 / (base ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
            ang = torch.outer(torch.arange(self.seq, device=device, dtype=torch.float32), inv)
            emb = torch.cat([ang, ang], -1).unsqueeze(1)
            self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)
        return init

    def p(self, i):
        return None if i is None else self.t[i]

    def norm(self, x, w, b):
        h = self.m["hidden"]
        if self.m["norm"] == "layernorm":
            return F.layer_norm(x, (h,), self.p(w), self.p(b), 1e-5)
        return F.rms_norm(x, (h,), self.p(w), 1e-6)

    def attention(self, L, x, selective):
        m = self.m
        b, s, h = x.shape
        nh, nkv, hd = m["heads"], m["kv_heads"], self.hd
        kv = nkv * hd
        qkv = self.lin(x, self.p(L["qkv_w"]), self.p(L["qkv_b"]))
        q, k, v = qkv.split([h, kv, kv], -1)
        q, k, v = q.view(b, s, nh, hd), k.view(b, s, nkv, hd), v.view(b, s, nkv, hd)
        if m.get("qk_norm"):
            if m["norm"] == "layernorm":
                q = F.layer_norm(q, (hd,), self.p(L["qnw"]), self.p(L["qnb"]), 1e-5)
                k = F.layer_norm(k, (hd,), self.p(L["knw"]), self.p(L["knb"]), 1e-5)
            else:
                q, k = F.rms_norm(q, (hd,), self.p(L["qnw"]), 1e-6), F.rms_norm(k, (hd,), self.p(L["knw"]), 1e-6)
        if m["pos"] == "rotary":
            c, sn = self.cos[:s], self.sin[:s]

            def rot(t):
                d = t.shape[-1] // 2
                return torch.cat([-t[..., d:], t[..., :d]], -1)

            q = q * c + rot(q) * sn
            k = k * c + rot(k) * sn
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        gqa = nkv != nh
        if selective and torch.is_grad_enabled():
            o = AttnCoreCheckpoint.apply(q, k, v, True, gqa)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        o = o.transpose(1, 2).reshape(b, s, h)
        return self.lin(o, self.p(L["o_w"]), self.p(L["o_b"]))

    def mlp(self, L, x):
        u = self.lin(x, self.p(L["fc1_w"]), self.p(L["fc1_b"]))
        kind = self.m["mlp"]
        if kind == "gelu":
            a = F.gelu(u, approximate="tanh")
        elif kind == "relu":
            a = F.relu(u)
        else:
            f = self.m["ffn"]
            a = F.silu(u[..., :f]) * u[..., f:]
        return self.lin(a, self.p(L["fc2_w"]), self.p(L["fc2_b"]))

    def layer(self, i, x, selective=False):
        L = self.layers[i]
        if self.m["parallel_block"]:
            n = self.norm(x, L["n1w"], L["n1b"])
            return x + self.attention(L, n, selective) + self.mlp(L, n)
        a = x + self.attention(L, self.norm(x, L["n1w"], L["n1b"]), selective)
        return a + self.mlp(L, self.norm(a, L["n2w"], L["n2b"]))

    def embed(self, ids):
        s = ids.shape[1]
        x = F.embedding(ids, self.p(self.wte))
        if self.proj_in is not None:
            x = self.lin(x, self.p(self.proj_in))
        if self.wpe is not None:
            off = self.m.get("position_offset", 0)
            x = x + self.p(self.wpe)[off:off + s]
        return x

    def logits(self, x):
        """Final norm, projection and the LM head on its weight padded to a multiple of 64 rows."""
        if self.fnw is not None:
            x = self.norm(x, self.fnw, self.fnb)
        if self.proj_out is not None:
            x = self.lin(x, self.p(self.proj_out))
        V = (self.m["vocab"] + 63) // 64 * 64
        return self.lin(x, self.p(self.head_w if self.head_w is not None else self.wte), self.p(self.head_b), V)

    def plain_loss(self, ids, labels):
        """--compile's forward (self.lin = plain_linear): F.linear everywhere,
        F.cross_entropy in fp32, no custom autograd function."""
        x = self.embed(ids)
        for i in range(len(self.layers)):
            x = self.layer(i, x)
        V = self.m["vocab"]
        return F.cross_entropy(self.logits(x)[..., :V].reshape(-1, V).float(), labels.reshape(-1), ignore_index=-100)

    def loss(self, ids, labels, ckpt, grad_hint=1.0):
        x = self.embed(ids)
        for i in range(len(self.layers)):
            if ckpt == "full":
                x = torch.utils.checkpoint.checkpoint(self.layer, i, x, use_reentrant=True)
            else:
                x = self.layer(i, x, ckpt == "selective")
        lg = self.logits(x)
        V = lg.shape[-1]
        rows = max(1, (256 << 20) // (4 * V))
        return ChunkedCrossEntropy.apply(lg.view(-1, V), labels.reshape(-1), rows, grad_hint)


# ---------------------------------------------------------------- flops (specs/flops.cpp)
def model_flops(m, seq, tokens):
    h, kv = m["hidden"], m["kv_heads"] * (m["hidden"] // m["heads"])
    attn = 2 * h * h + 2 * h * kv
    mlp = (3 if m["mlp"] == "swiglu" else 2) * h * m["ffn"]
    width = m["word_embed_dim"] if m.get("word_embed_dim", 0) > 0 else h
    head = width * m["vocab"]
    if m.get("word_embed_dim", 0) > 0 and m["word_embed_dim"] != h:
        head += h * m["word_embed_dim"]
    matmul = m["layers"] * (attn + mlp) + head
    fwd = 2.0 * matmul + 4.0 * m["layers"] * seq * h
    return 3.0 * fwd * tokens


def timed_steps(train_step, total, warmup, cuda, on_warmup_step, before_timing=None):
    """Runs train_step(s) for s in range(total); the steps from `warmup` on are
    timed (CUDA events on the current stream, or the host clock). Returns the
    step losses (tensors) and the timed steps' seconds. `before_timing` runs once
    before the first timed step (after a synchronisation); peak memory
    statistics are reset there."""
    losses, times, ev = [], [], []
    if cuda:
        torch.cuda.synchronize()
    for s in range(total):
        timed = s >= warmup
        if timed and s == warmup:
            if cuda:
                torch.cuda.synchronize()
            if before_timing:
                before_timing()
            if cuda:
                torch.cuda.reset_peak_memory_stats()
        if timed:
            if cuda:
                e0 = torch.cuda.Event(enable_timing=True)
                e0.record()
            else:
                t0 = time.perf_counter()
        loss = train_step(s)
        if timed:
            if cuda:
                e1 = torch.cuda.Event(enable_timing=True)
                e1.record()
                ev.append((e0, e1))
            else:
                times.append(time.perf_counter() - t0)
        losses.append(loss)
        if not timed:
            on_warmup_step(s, loss)
    if cuda:
        torch.cuda.synchronize()
        times = [e0.elapsed_time(e1) / 1e3 for e0, e1 in ev]
    return losses, times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("-o", "--output")
    ap.add_argument("--compile", action="store_true",
                    help="plain layers and F.cross_entropy under torch.compile (see the module text)")
    ap.add_argument("--profile", help="profile one extra step with torch.profiler and write the kernel table here")
    a = ap.parse_args()
    plan = json.load(open(a.plan))
    m, st, seq = plan["model"], plan["strategy"], plan["seq"]
    if st.get("dp", 1) != 1 or st.get("tp", 1) != 1 or st.get("pp", 1) != 1:
        raise SystemExit("one-device plans only")
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    prec = st["precision"]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[prec]
    if a.compile and (st["ckpt"] != "none" or m.get("moe") or m.get("sliding_window", 0)):
        raise SystemExit("--compile runs plans without checkpointing, experts or windows")
    if prec == "fp16":
        raise SystemExit("the reference runs bf16 and fp32 (fp16 loss scaling not implemented here)")
    if cuda:
        torch.set_float32_matmul_precision("high")
    mbs, gas, ckpt = st["mbs"], st["gas"], st["ckpt"]
    lr, b1, b2, eps, wd, clip = a.lr, 0.9, 0.95, 1e-8, 0.1, 1.0

    torch.cuda.reset_peak_memory_stats() if cuda else None
    model = Model(m, seq)
    master = model.materialize(dev, dtype, a.seed)
    P = model.P
    n, nd = P.numel, P.decay_numel
    mixed = dtype != torch.float32
    exp_avg = torch.zeros(n, device=dev)
    exp_avg_sq = torch.zeros(n, device=dev)
    step_t = torch.zeros((), device=dev)
    chunk = min(n, 1 << 26)
    work = torch.empty(chunk, device=dev) if mixed else None
    tokens = SyntheticTokens(m["vocab"], a.seed)

    def batch(step, micro):
        host = torch.from_numpy(tokens.batch(step, micro, mbs, seq))
        if cuda:
            host = host.pin_memory()
        d = host.to(dev, non_blocking=cuda)
        return d[:, :seq], d[:, 1:]

    def opt_step(t):
        with torch.no_grad():
            norm = torch.linalg.vector_norm(P.grad, 2, dtype=torch.float32)
            divisor = ((norm + 1e-6) / clip).clamp_min(1.0)
            step_t.fill_(float(t))
            for o in range(0, n, chunk):
                c = min(chunk, n - o)
                gc = work[:c].copy_(P.grad[o:o + c]) if mixed else P.grad[o:o + c]
                split = max(0, min(nd - o, c))
                for lo, hi, w in ((0, split, wd), (split, c, 0.0)):
                    if hi > lo:
                        torch._fused_adamw_([master[o + lo:o + hi]], [gc[lo:hi]], [exp_avg[o + lo:o + hi]],
                                            [exp_avg_sq[o + lo:o + hi]], [], [step_t], lr=lr, beta1=b1, beta2=b2,
                                            weight_decay=w, eps=eps, amsgrad=False, maximize=False, grad_scale=divisor)
                if mixed:
                    P.flat[o:o + c].copy_(master[o:o + c])

    if a.compile:
        model.lin = plain_linear
    compiled = torch.compile(model.plain_loss) if a.compile else None

    def train_step(s):
        P.grad.zero_()
        loss_sum = torch.zeros((), device=dev)
        for micro in range(gas):
            ids, labels = batch(s, micro)
            loss = compiled(ids, labels) if compiled else model.loss(ids, labels, ckpt, 1.0 / gas)
            (loss * (1.0 / gas)).backward()
            loss_sum += loss.detach()
        opt_step(s + 1)
        return loss_sum / gas

    total = a.warmup + a.steps
    losses, times = timed_steps(train_step, total, a.warmup, cuda,
                                lambda s, l: print(f"reference: warm-up step {s + 1}/{total} loss {l.item():.4f}",
                                                   file=sys.stderr))
    losses = [l.item() for l in losses]
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            train_step(total)
            if cuda:
                torch.cuda.synchronize()
        key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        with open(a.profile, "w") as f:
            f.write(prof.key_averages().table(sort_by=key, row_limit=60, max_name_column_width=90))
    med = float(np.median(times))
    tokens_per_step = mbs * gas * seq
    mflops = model_flops(m, seq, tokens_per_step)
    g = plan["cluster"]["gpu"]
    peak = {"bf16": g.get("peak_bf16_TFLOPS", 0), "fp16": g.get("peak_fp16_TFLOPS", 0),
            "fp32": g.get("peak_fp32_TFLOPS", 0)}[prec] * 1e12
    res = {
        "impl": "pytorch-compile" if a.compile else "pytorch-eager",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name() if cuda else platform.processor(),
        "plan": a.plan,
        "model": m["name"],
        "params": n,
        "precision": prec,
        "mbs": mbs, "gas": gas, "seq": seq, "ckpt": ckpt,
        "steps": a.steps, "warmup": a.warmup,
        "step_seconds": {"median": med, "min": min(times), "max": max(times),
                         "p10": float(np.percentile(times, 10)), "p90": float(np.percentile(times, 90)), "all": times},
        "tokens_per_second": tokens_per_step / med,
        "samples_per_second": mbs * gas / med,
        "model_tflops": mflops / med / 1e12,
        "mfu": (mflops / med / peak) if (cuda and peak > 0) else None,
        "losses": losses,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
    }
    print(f"reference{' (compiled)' if a.compile else ''} {m['name']} {prec} mbs={mbs} gas={gas} seq={seq}: step {med:.4f} s, "
          f"{res['tokens_per_second']:.0f} tok/s, {res['model_tflops']:.1f} TFLOP/s, "
          f"MFU {res['mfu'] * 100 if res['mfu'] else float('nan'):.1f}%, loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
          f"peak alloc {res['peak_allocated_bytes'] / 2**30 if cuda else 0:.2f} GiB")
    if a.output:
        with open(a.output, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
