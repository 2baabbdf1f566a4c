"""Size sweep for every kernels/ op: reference vs Triton (GPU) or reference only (CPU), against a roofline floor.

    python benchmarks/kernels/bench.py [--config benchmarks/kernels/sizes.json] [--ops topk_scores,...] [--out DIR]

Sizes come from the config. Floors are measured in the same run: copy bandwidth (a large tensor copy) and matmul rate
(a square matmul in the op's dtype); floor = max(bytes moved / bandwidth, flops / matmul rate); the table prints
achieved fraction = floor / measured time. GPU timings: triton.testing.do_bench, median. CPU: median of repeated
wall-clock runs. Results go to <out>/<device>.csv keyed by op, provider, size and device.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels.decode_attention import decode_attention
from kernels.kv_cache import kv_budget_qk, kv_compress, layer_budgets
from kernels.pairwise_kernel import pairwise_kernel
from kernels.preferdiff_loss import preferdiff_loss
from kernels.topk_scores import topk_scores

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def timeit(fn, device: str) -> float:
    """Median milliseconds."""
    if device == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    fn()
    times = []
    t_end = time.perf_counter() + 1.0
    while len(times) < 3 or (time.perf_counter() < t_end and len(times) < 20):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure_floors(device: str, dtype: torch.dtype) -> tuple[float, float]:
    """(bytes/s copy bandwidth counting read + write, flop/s of a square matmul in dtype)."""
    n_bytes = (256 << 20) if device == "cuda" else (32 << 20)
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    t = timeit(lambda: dst.copy_(src), device) / 1e3
    bw = 2 * n_bytes / t
    n = 4096 if device == "cuda" else 512
    mm_dtype = dtype if device == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=mm_dtype)
    b = torch.randn(n, n, device=device, dtype=mm_dtype)
    t = timeit(lambda: a @ b, device) / 1e3
    return bw, 2 * n**3 / t


def case_topk(s, dev, dt):
    q = torch.randn(s["B"], s["d"], device=dev, dtype=dt)
    t = torch.randn(s["N"], s["d"], device=dev, dtype=dt)
    e = torch.finfo(dt).bits // 8
    run = {p: (lambda p=p: topk_scores(q, t, s["k"], backend=p)) for p in ("reference", "triton")}
    return run, (s["N"] + s["B"]) * s["d"] * e, 2 * s["B"] * s["N"] * s["d"]


def case_decode(s, dev, dt):
    B, H, Hkv, M, D = s["B"], s["H"], s["Hkv"], s["M"], s["D"]
    q = torch.randn(B, H, D, device=dev, dtype=dt)
    k = torch.randn(B, Hkv, M, D, device=dev, dtype=dt)
    v = torch.randn(B, Hkv, M, D, device=dev, dtype=dt)
    lengths = torch.randint(M // 2, M + 1, (B, Hkv), device=dev)
    e = torch.finfo(dt).bits // 8
    n_tok = int(lengths.sum())
    run = {p: (lambda p=p: decode_attention(q, k, v, lengths, backend=p)) for p in ("reference", "triton")}
    return run, 2 * n_tok * D * e + 2 * B * H * D * e, 4 * n_tok * (H // Hkv) * D


def case_pairwise(s, dev, dt):
    X = torch.randn(s["n"], s["d"], device=dev, dtype=dt)
    Y = torch.randn(s["m"], s["d"], device=dev, dtype=dt)
    ls = torch.rand(s["d"], device=dev) + 0.5

    def fwd_bwd(p):
        lsg = ls.clone().requires_grad_()
        K = pairwise_kernel(X, Y, lsg, s["kind"], backend=p)
        K.backward(torch.ones_like(K))

    run = {p: (lambda p=p: fwd_bwd(p)) for p in ("reference", "triton")}
    # forward writes K, backward reads dK; two passes of 2 n m d flops plus one more matmul in the backward
    return run, 2 * s["n"] * s["m"] * 4, 6 * s["n"] * s["m"] * s["d"]


def case_preferdiff(s, dev, dt):
    xs = [torch.randn(s["B"], s["d"], device=dev, dtype=dt, requires_grad=True) for _ in range(4)]
    e = torch.finfo(dt).bits // 8

    def fwd_bwd(p):
        loss = preferdiff_loss(*xs, 0.4, 5.0, backend=p)
        torch.autograd.grad(loss, xs)

    run = {p: (lambda p=p: fwd_bwd(p)) for p in ("reference", "triton")}
    return run, 12 * s["B"] * s["d"] * e, 30 * s["B"] * s["d"]


def case_kv_budget(s, dev, dt):
    L, H, Hkv, tau, m, D = s["L"], s["H"], s["Hkv"], s["tau"], s["m"], s["D"]
    q = torch.randn(L, H, tau, D, device=dev, dtype=dt)
    k = torch.randn(L, Hkv, m, D, device=dev, dtype=dt)
    e = torch.finfo(dt).bits // 8
    run = {p: (lambda p=p: kv_budget_qk(q, k, 0.1, backend=p)) for p in ("reference", "triton")}
    return run, 2 * L * Hkv * m * D * e + L * H * m * 4, 2 * 2 * L * H * tau * m * D


def case_kv_compress(s, dev, dt):
    L, H, m, D = s["L"], s["H"], s["m"], s["D"]
    k = torch.randn(L, H, m, D, device=dev, dtype=dt)
    v = torch.randn(L, H, m, D, device=dev, dtype=dt)
    scores = torch.rand(L, H, m, device=dev)
    budgets = layer_budgets(torch.rand(L) + 0.5, s["alpha"], m).to(dev)
    e = torch.finfo(dt).bits // 8
    kept = int(budgets.sum()) * H
    run = {p: (lambda p=p: kv_compress(k, v, scores, budgets, 32, backend=p)) for p in ("reference", "triton")}
    return run, 2 * 2 * kept * D * e + L * H * m * 4, 0


CASES = {"topk_scores": case_topk, "decode_attention": case_decode, "pairwise_kernel": case_pairwise,
         "preferdiff_loss": case_preferdiff, "kv_budget_qk": case_kv_budget, "kv_compress": case_kv_compress}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(Path(__file__).with_name("sizes.json")))
    ap.add_argument("--ops", default=",".join(CASES))
    ap.add_argument("--out", default=str(Path(__file__).with_name("results")))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    device = args.device
    config = json.loads(Path(args.config).read_text())
    dev_name = torch.cuda.get_device_name(0).replace(" ", "_") if device == "cuda" else "cpu"
    providers = ("reference", "triton") if device == "cuda" else ("reference",)
    rows = []
    floors = {}
    print(f"device {dev_name}; providers {providers}")
    print(f"{'op':<18}{'provider':<11}{'size':<52}{'ms':>10}{'floor ms':>10}{'of floor':>9}{'speedup':>9}")
    for op in args.ops.split(","):
        spec = config[op]
        dt = DTYPES[spec.get("dtype_gpu", "float32")] if device == "cuda" else torch.float32
        if dt not in floors:
            floors[dt] = measure_floors(device, dt)
            print(f"# floors ({str(dt)[6:]}): copy {floors[dt][0] / 1e9:.1f} GB/s, matmul {floors[dt][1] / 1e12:.2f} "
                  "TFLOP/s")
        bw, rate = floors[dt]
        for size in spec[device if device in spec else "cpu"]:
            run, n_bytes, flops = CASES[op](size, device, dt)
            floor_ms = max(n_bytes / bw, flops / rate) * 1e3
            size_s = ",".join(f"{k}={v}" for k, v in size.items())
            base = None
            for p in providers:
                try:
                    ms = timeit(run[p], device)
                except Exception as exc:  # noqa: BLE001 report and keep sweeping: a failure here is a finding, not a crash
                    print(f"{op:<18}{p:<11}{size_s:<52} FAILED: {type(exc).__name__}: {exc}")
                    continue
                base = ms if p == "reference" else base
                speed = f"{base / ms:.2f}x" if base else "-"
                print(f"{op:<18}{p:<11}{size_s:<52}{ms:>10.3f}{floor_ms:>10.3f}{floor_ms / ms:>9.1%}{speed:>9}")
                rows.append({"op": op, "provider": p, "size": size_s, "device": dev_name, "dtype": str(dt)[6:],
                             "median_ms": f"{ms:.4f}", "floor_ms": f"{floor_ms:.4f}",
                             "fraction_of_floor": f"{floor_ms / ms:.4f}", "bytes": n_bytes, "flops": flops})
            if device == "cuda":
                torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dev_name}.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["op"])
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "0")
    raise SystemExit(main())
