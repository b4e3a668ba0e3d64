#!/usr/bin/env python3
"""Does the offload step's CPU AdamW lose its rate to how its host memory is allocated?

calibrate measured, in one process seconds apart, 4.2-4.5e9 parameters/s for
the AdamW on ordinary (pageable) buffers and 2.1-4.0e9 for the same update on
the Engine's pinned buffers (cudaHostAlloc) on its worker thread
(validation/archive/h200x2/offload5). cudaHostAlloc pins freshly allocated 4 KiB
pages; pageable memory of this size is backed by transparent huge pages where
the kernel allows it, and a streaming update over gigabytes then takes far
fewer TLB misses (more so in a virtual machine, whose page walks are nested).

The same work as runtime/optim/adamw.hpp's adam_range (16-bit gradient into an
fp32 work chunk, torch._fused_adamw_ on fp32 master and moments, the master
written back in 16 bits) over PARAMS (default 2^27) parameters, on buffers
allocated these ways:
  pageable    torch.empty (malloc; huge pages as the system's THP setting says)
  pinned      torch.empty(pin_memory=True) (cudaHostAlloc, as the Engine)
  huge+reg    mmap, madvise(MADV_HUGEPAGE), touched, then cudaHostRegister
  small+reg   mmap, madvise(MADV_NOHUGEPAGE), touched, then cudaHostRegister
  huge        mmap, madvise(MADV_HUGEPAGE), touched, not registered
each timed on the main thread and on a fresh worker thread (as the Engine's
offload step runs it), median of 5 passes, with the huge pages the kernel
gave each buffer (/proc/self/smaps). pinned and pageable are measured again
at the end to show drift. Then two processes at once (each half the cores),
pinned against huge+reg, as two ranks of one host run their offload steps.
  [PARAMS=n] python3 benchmarks/cpu_adam_pages.py [--json OUT]
"""
import argparse, json, mmap, multiprocessing as mp, os, time

import torch

# The update, its size (PARAMS) and its timing are cpu_adam_threads.py's.
from cpu_adam_threads import CHUNK, N, one_pass, rate as rate_with

CUDA = torch.cuda.is_available()
_keep = []  # (mmap, registered pointer) of the mmap schemes' live buffers


def smaps_of(ptr):
    """Rss and AnonHugePages (KiB) of the mapping holding address ptr."""
    cur, out = None, None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                cur = lo <= ptr < hi
                if cur:
                    out = {"mapping_bytes": hi - lo}
            elif cur and head in ("Rss:", "AnonHugePages:", "KernelPageSize:"):
                out[head[:-1]] = int(line.split()[1])
    return out


def mmap_tensor(n, dtype, huge, register):
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mm.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    t = torch.frombuffer(mm, dtype=dtype)
    t.zero_()  # touched: the pages exist before they are pinned
    ptr = t.data_ptr()
    if register:
        err = torch.cuda.cudart().cudaHostRegister(ptr, nbytes, 0)
        if int(err) != 0:
            raise RuntimeError(f"cudaHostRegister: {err}")
    _keep.append((mm, ptr if register else None, t))
    return t


def release():
    while _keep:
        mm, ptr, t = _keep.pop()
        if ptr is not None:
            torch.cuda.cudart().cudaHostUnregister(ptr)
        del t
        try:
            mm.close()
        except BufferError:
            pass


def buffers(scheme):
    def alloc(n, dtype):
        if scheme == "pageable":
            return torch.zeros(n, dtype=dtype)
        if scheme == "pinned":
            return torch.zeros(n, dtype=dtype, pin_memory=True)
        return mmap_tensor(n, dtype, huge=scheme.startswith("huge"), register=scheme.endswith("+reg"))
    master, m, v = alloc(N, torch.float32), alloc(N, torch.float32), alloc(N, torch.float32)
    g16, p16 = alloc(N, torch.bfloat16), alloc(N, torch.bfloat16)
    master.normal_(), g16.normal_()
    work = torch.empty(CHUNK)
    return master, m, v, g16, p16, work


def rate(b, in_worker):
    return rate_with(b, torch.get_num_threads(), in_worker)


def measure(scheme):
    t0 = time.perf_counter()
    b = buffers(scheme)
    alloc_s = time.perf_counter() - t0
    pages = smaps_of(b[0].data_ptr())
    r = {"scheme": scheme, "threads": torch.get_num_threads(), "alloc_seconds": alloc_s, "master_smaps_kib": pages,
         "main": rate(b, False), "worker": rate(b, True)}
    del b
    release()
    print(json.dumps(r), flush=True)
    return r


def two_proc_child(scheme, threads, barrier, q):
    torch.set_num_threads(threads)
    b = buffers(scheme)
    one_pass(b)
    barrier.wait()
    q.put(rate(b, True))


def two_processes(scheme, threads):
    ctx = mp.get_context("spawn")  # the parent has initialised CUDA
    barrier, q = ctx.Barrier(2), ctx.Queue()
    ps = [ctx.Process(target=two_proc_child, args=(scheme, threads, barrier, q)) for _ in range(2)]
    for p in ps: p.start()
    r = {"scheme": scheme, "threads_each": threads, "per_process": [q.get(timeout=300), q.get(timeout=300)]}
    for p in ps: p.join(timeout=60)
    print(json.dumps(r), flush=True)
    return r


def read(path):
    try:
        return open(path).read().strip()
    except OSError as e:
        return f"? {e}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    cores = os.cpu_count()
    res = {"cores": cores, "torch": torch.__version__, "params": N, "cuda": CUDA,
           "thp_enabled": read("/sys/kernel/mm/transparent_hugepage/enabled"),
           "thp_defrag": read("/sys/kernel/mm/transparent_hugepage/defrag"),
           "numa_nodes": sorted(os.listdir("/sys/devices/system/node")) if os.path.isdir("/sys/devices/system/node") else [],
           "loadavg": read("/proc/loadavg"), "runs": [], "two_processes": []}
    print(json.dumps({k: v for k, v in res.items() if k not in ("runs", "two_processes")}), flush=True)
    schemes = ["pageable", "pinned", "huge+reg", "small+reg", "huge", "pinned", "pageable"] if CUDA else \
        ["pageable", "huge", "pageable"]
    for s in schemes:
        res["runs"].append(measure(s))
    if CUDA:
        for s in ("pinned", "huge+reg"):
            res["two_processes"].append(two_processes(s, max(1, cores // 2)))
    res["loadavg_end"] = read("/proc/loadavg")
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
