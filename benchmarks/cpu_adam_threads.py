#!/usr/bin/env python3
"""Where the offload step's CPU AdamW loses its rate on a shared host.

The same work as runtime/optim/adamw.hpp's adam_range (16-bit gradient into an
fp32 chunk, torch._fused_adamw_ on fp32 master and moments, the master
written back in 16 bits) over 2^27 parameters in pinned buffers, timed
(median of 5 passes) in these settings:
  main thread, N intra-op threads (N = all cores, all - 1, half);
  a fresh worker thread (as the Engine's offload step runs it);
  each of those beside a process spinning on one core (as an MPI barrier or a
  CUDA synchronisation spins);
  two processes at once, each with half the cores, starting together.
  [PARAMS=n] python3 benchmarks/cpu_adam_threads.py [--json OUT]
Not yet run to the end on a GPU machine: its first device call ran past 240 s
with nothing back (its output went through `cut`, whose buffer the timeout
lost). The likely cause, the two processes forked after the parent had
initialised CUDA, is removed: they are spawned now.
"""
import argparse, json, multiprocessing as mp, os, statistics, threading, time

import torch

N = int(os.environ.get("PARAMS", 1 << 27))
CHUNK = min(N, 1 << 26)


def buffers(pinned):
    kw = dict(pin_memory=pinned)  # pinned as the Engine's, where there is a GPU
    master = torch.empty(N, **kw).normal_()
    m, v = torch.zeros(N, **kw), torch.zeros(N, **kw)
    g16 = torch.empty(N, dtype=torch.bfloat16, **kw).normal_()
    p16 = torch.empty(N, dtype=torch.bfloat16, **kw)
    work = torch.empty(CHUNK)
    return master, m, v, g16, p16, work


def one_pass(b):
    master, m, v, g16, p16, work = b
    step, div = torch.ones(()), torch.ones(())
    for o in range(0, N, CHUNK):
        g = work[: min(CHUNK, N - o)].copy_(g16[o:o + CHUNK])
        torch._fused_adamw_([master[o:o + CHUNK]], [g], [m[o:o + CHUNK]], [v[o:o + CHUNK]], [], [step],
                            lr=3e-4, beta1=0.9, beta2=0.95, weight_decay=0.1, eps=1e-8, amsgrad=False,
                            maximize=False, grad_scale=None, found_inf=None)
    p16.copy_(master)


def rate(b, threads, in_worker, reps=5):
    torch.set_num_threads(threads)
    out = {}
    def run():
        # A worker does not set its team (as the Engine's does not): threads_seen
        # shows what a new thread gets from the main thread's setting.
        out["threads_seen"] = torch.get_num_threads()
        one_pass(b)
        t = []
        for _ in range(reps):
            t0 = time.perf_counter(); one_pass(b); t.append(time.perf_counter() - t0)
        out["t"] = t
    if in_worker:
        th = threading.Thread(target=run); th.start(); th.join()
    else:
        run()
    return {"threads": threads, "threads_seen": out["threads_seen"], "worker": in_worker,
            "params_per_second": N / statistics.median(out["t"]), "fastest": N / min(out["t"]),
            "slowest": N / max(out["t"])}


def spin(stop):
    while not stop.is_set():
        pass


def two_proc_child(threads, barrier, q):
    b = buffers(torch.cuda.is_available())
    one_pass(b)
    barrier.wait()
    q.put(rate(b, threads, True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    cores = os.cpu_count()
    res = {"cores": cores, "torch": torch.__version__, "params": N, "single": [], "spinning": [], "two_processes": None}
    b = buffers(torch.cuda.is_available())
    for threads in (cores, cores - 1, cores // 2):
        for w in (False, True):
            r = rate(b, threads, w); res["single"].append(r); print("alone", r, flush=True)
    fork = mp.get_context("fork")  # the spinner touches no CUDA
    stop = fork.Event(); sp = fork.Process(target=spin, args=(stop,)); sp.start()
    for threads in (cores, cores - 1):
        for w in (False, True):
            r = rate(b, threads, w); res["spinning"].append(r); print("beside a spinning process", r, flush=True)
    stop.set(); sp.join()
    del b
    # Spawned, not forked: the parent has initialised CUDA (pinned memory), and
    # a forked child cannot use it.
    ctx = mp.get_context("spawn")
    barrier, q = ctx.Barrier(2), ctx.Queue()
    ps = [ctx.Process(target=two_proc_child, args=(cores // 2, barrier, q)) for _ in range(2)]
    for p in ps: p.start()
    res["two_processes"] = [q.get(), q.get()]
    for p in ps: p.join()
    print("two processes at once", res["two_processes"], flush=True)
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
