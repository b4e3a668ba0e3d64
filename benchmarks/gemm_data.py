"""Does a bf16 GEMM's speed on this GPU depend on the values it multiplies?

Times C = A B^T for transformer shapes with inputs drawn several ways (standard
normal as calibrate draws them, weights at std 0.02 as the runtime initialises
them, uniform, zeros), back to back and interleaved with a memory-bound copy,
and reads the SM clock after each. Prints one line per case; --json writes them.
"""
import argparse, json, subprocess, time
import torch


def clock():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=5).stdout.strip()
    except Exception:
        return "?"


def timed(fn, calls, filler=None):
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for a, b in ev:
        a.record(); fn(); b.record()
        if filler is not None:
            filler()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) / 1e3 for a, b in ev)
    return t[len(t) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = "cuda"
    shapes = [(8192, 11264, 2048), (8192, 2048, 5632), (16384, 4800, 1600), (8192, 8192, 8192)]
    src = torch.randn(1 << 26, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    rows = []
    for m, n, k in shapes:
        for kind in ("randn", "act-randn x w-0.02", "w-0.02 both", "uniform01", "zeros"):
            g = torch.Generator(device=dev).manual_seed(0)
            def draw(r, c, std):
                return torch.randn(r, c, device=dev, dtype=torch.float32, generator=g).mul_(std).to(torch.bfloat16)
            if kind == "randn":
                x, w = draw(m, k, 1.0), draw(n, k, 1.0)
            elif kind == "act-randn x w-0.02":
                x, w = draw(m, k, 1.0), draw(n, k, 0.02)
            elif kind == "w-0.02 both":
                x, w = draw(m, k, 0.02), draw(n, k, 0.02)
            elif kind == "uniform01":
                x = torch.rand(m, k, device=dev, generator=g).to(torch.bfloat16)
                w = torch.rand(n, k, device=dev, generator=g).to(torch.bfloat16)
            else:
                x = torch.zeros(m, k, device=dev, dtype=torch.bfloat16)
                w = torch.zeros(n, k, device=dev, dtype=torch.bfloat16)
            y = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            fn = lambda: torch.mm(x, w.t(), out=y)
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
            calls = max(20, int(0.2 / max(1e-5, timed(fn, 5))))
            b2b = timed(fn, calls)
            c1 = clock()
            cn = int(min(src.numel(), b2b / (timed(lambda: dst.copy_(src), 5) / src.numel())))
            inter = timed(fn, calls, lambda: dst[:cn].copy_(src[:cn]))
            c2 = clock()
            f = 2.0 * m * n * k
            row = {"m": m, "n": n, "k": k, "data": kind, "back_to_back_tflops": f / b2b / 1e12,
                   "interleaved_tflops": f / inter / 1e12, "clock_power_b2b": c1, "clock_power_inter": c2}
            rows.append(row)
            print(f"{m}x{n}x{k} {kind:22s} back-to-back {row['back_to_back_tflops']:6.0f}  interleaved "
                  f"{row['interleaved_tflops']:6.0f} TFLOP/s   sm MHz, W: {c1} | {c2}", flush=True)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
