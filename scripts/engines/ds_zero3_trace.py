#!/usr/bin/env python3
"""How many parameter elements DeepSpeed 0.19.8 ZeRO-3 holds gathered at the loss's backward, for a plan's
model as scripts/engines/torch_model.py builds it: a replay of the parameter coordinator, written from
reading deepspeed/runtime/zero/partitioned_param_coordinator.py and parameter_offload.py (not their code).

  python3 scripts/engines/ds_zero3_trace.py PLAN.json [PLAN.json ...] [--timeline]

1. The module trace: torch_model.Decoder built on the meta device, with hooks where parameter_offload.py
   puts DeepSpeed's (_register_deepspeed_module): a fetch at every module's forward (containers too) and at
   its backward's start (an autograd function on its outputs), a release after its forward and after its
   backward (an autograd function on its inputs, when the last input gradient has passed). One forward,
   the trainer's loss (lm_loss) and its backward give the order; no memory is used.
2. The coordinator with a complete trace (every step after the first records none): fetch_sub_module
   gathers the module's own parameters, pops them off the parameter queue, then prefetches queue entries
   not yet gathered until stage3_prefetch_bucket_size elements are under way, capped by
   stage3_max_live_parameters less __n_available_params, noting for every entry it passes the step of its
   use (__most_recent_step_id_param_fetched_for); release_sub_module releases what __params_to_release
   gives: the module's own non-persistent parameters, less those whose noted use is later than the step and
   those met again within stage3_max_reuse_distance elements of the trace from the step on.
   Persistent parameters (stage3_param_persistence_threshold: numel <= 1e5) stay gathered and are not counted.

Prints, per plan, the elements gathered (a whole 16-bit copy each) and in flight (their all-gather
buffer) when the forward has ended and the loss's backward runs, and the most at any point of the step.
The export's config: prefetch 5e7, max live 1e9, reuse distance 1e9, persistence 1e5
(planner/export_deepspeed.cpp, DeepSpeed's defaults for the last two).
"""
import collections
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402

PREFETCH, MAX_LIVE, REUSE, PERSIST = int(5e7), int(1e9), int(1e9), int(1e5)


def module_trace(spec, seq):
    """Events in step order: ("F"|"B", module) fetches, ("FR"|"BR", module) releases, ("LOSS", None)."""
    with torch.device("meta"):
        model = torch_model.Decoder(spec, seq)
    mods = list(model.modules())
    ids = {m: i for i, m in enumerate(mods)}
    events, remaining = [], collections.Counter()

    def marker(on_backward):
        """An identity whose backward calls on_backward(module id) when the gradient passes it."""

        class Marker(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, mid):
                ctx.mid = mid
                return x.view_as(x)

            @staticmethod
            def backward(ctx, g):
                on_backward(ctx.mid)
                return g, None

        return Marker

    def released(mid):
        remaining[mid] -= 1
        if remaining[mid] == 0:
            events.append(("BR", mid))

    BeforeBackward = marker(lambda mid: events.append(("B", mid)))
    AfterBackward = marker(released)

    def pre_forward(m, args):
        events.append(("F", ids[m]))
        remaining[ids[m]] = sum(1 for a in args if torch.is_tensor(a) and a.requires_grad)
        return tuple(AfterBackward.apply(a, ids[m]) if torch.is_tensor(a) and a.requires_grad else a for a in args)

    def post_forward(m, args, out):
        events.append(("FR", ids[m]))
        return BeforeBackward.apply(out, ids[m]) if torch.is_tensor(out) and out.requires_grad else out

    for m in mods:
        m.register_forward_pre_hook(pre_forward)
        m.register_forward_hook(post_forward)
    tokens = torch.zeros(1, seq, dtype=torch.long, device="meta")
    logits = model(tokens)
    events.append(("LOSS", None))
    torch_model.lm_loss(logits, tokens).backward()
    pid = {id(p): i for i, p in enumerate(model.parameters())}  # a tied weight once
    numel = {pid[id(p)]: p.numel() for p in model.parameters()}
    own = {ids[m]: sorted(pid[id(p)] for p in m._parameters.values() if p is not None) for m in mods}
    names = {ids[m]: n or "(root)" for n, m in model.named_modules()}
    return events, numel, own, names


class Coordinator:
    """The steady-state coordinator over one recorded trace (elements, not bytes)."""

    def __init__(self, events, numel, own):
        self.numel, self.own = numel, own
        self.trace = [mid for kind, mid in events if kind in ("F", "B")]
        self.persist = {p for p, n in numel.items() if n <= PERSIST}
        self.queue = collections.deque((p, s) for s, mid in enumerate(self.trace) for p in own[mid])
        self.noted = collections.defaultdict(lambda: -10**18)
        self.available, self.inflight = set(self.persist), set()
        self.active = collections.defaultdict(set)
        self.step = self.n_available = 0

    def held(self):
        return sum(self.numel[p] for p in self.available - self.persist), sum(self.numel[p] for p in self.inflight)

    def fetch(self, mid):
        for p in self.own[mid]:
            if p not in self.available and p not in self.inflight:
                self.n_available += self.numel[p]
            self.available.add(p)
            self.inflight.discard(p)
            self.active[p].add(mid)
        wanted = {p for p in self.own[mid] if self.noted[p] < self.step}
        for _ in range(len(wanted)):  # the module's own entries leave the queue
            p, s = self.queue.popleft()
            self.noted[p] = s
        budget, taken = min(MAX_LIVE - self.n_available, PREFETCH), 0
        while self.queue and taken < budget:
            p, s = self.queue.popleft()
            self.noted[p] = max(self.noted[p], s)
            if p not in self.available and p not in self.inflight:
                self.inflight.add(p)
                taken += self.numel[p]
        self.n_available += taken
        self.step += 1

    def to_release(self, mid):
        out = {p for p in self.own[mid] if p not in self.persist and self.noted[p] <= self.step}
        walked = 0
        for m in self.trace[self.step:]:
            if walked >= REUSE:
                break
            for p in self.own[m]:
                out.discard(p)
                walked += self.numel[p]
        return out

    def release(self, mid):
        out = self.to_release(mid)
        for p in self.own[mid]:
            self.active[p].discard(mid)
            if p in out and p in self.available and not self.active[p]:
                self.available.discard(p)
                self.n_available -= self.numel[p]


def replay(plan_path, timeline=False):
    plan = json.load(open(plan_path))
    events, numel, own, names = module_trace(plan["model"], plan["seq"])
    c = Coordinator(events, numel, own)
    at_loss, most = None, (0, "")
    for kind, mid in events:
        if kind in ("F", "B"):
            c.fetch(mid)
        elif kind in ("FR", "BR"):
            c.release(mid)
        else:
            at_loss = c.held()
        total = sum(c.held())
        if total > most[0]:
            most = (total, f"{kind} {names.get(mid, '')}")
        if timeline and kind in ("F", "B"):
            print(f"  {kind} {names[mid]:32s} gathered {c.held()[0] / 1e6:8.1f}M in flight {c.held()[1] / 1e6:6.1f}M")
    name = os.path.basename(plan_path)[:-5]
    print(f"{name}: {plan['model']['name']}, {sum(numel.values()) / 1e6:.1f}M parameters; at the loss's backward "
          f"{at_loss[0] / 1e6:.1f}M gathered + {at_loss[1] / 1e6:.1f}M in flight = {sum(at_loss) / 1e6:.1f}M "
          f"({2 * sum(at_loss) / 2**30:.3f} GiB in bf16); most in the step {most[0] / 1e6:.1f}M at {most[1]}")


def main():
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not paths:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    for p in paths:
        replay(p, "--timeline" in sys.argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
