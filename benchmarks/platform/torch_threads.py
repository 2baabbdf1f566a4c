"""torch intra-op threads on a shared machine: the moderation encoder (MiniLM, the platform's most common CPU
forward) encoding padded batches of texts with 1 thread against 2 (and each count in --threads), rounds interleaved
so that load from other processes falls on every setting alike. With --load N, N busy-looping processes of this
script compete for the cores while it measures (what a worker, a server and another user's job do to each other on
a small machine). Prints a table and the ratio of each count's median time to one thread's.

The default of `jobs.torch_threads` (services/common/settings.py) comes from this: see RESULTS.md.

    .venv/bin/python benchmarks/platform/torch_threads.py                  # machine as it is
    .venv/bin/python benchmarks/platform/torch_threads.py --load 1         # plus one busy process
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _busy(stop) -> None:
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x += i * i


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rounds (each times every count once)")
    ap.add_argument("--batch", type=int, default=16, help="texts per forward")
    ap.add_argument("--load", type=int, default=0, help="busy-looping processes running beside the measurement")
    a = ap.parse_args()
    import torch

    from services.common.minilm import get_base_encoder

    counts = [int(x) for x in a.threads.split(",")]
    enc = get_base_encoder()
    texts = [f"sample text number {i}: how do I keep my account safe when travelling abroad with a laptop?"
             for i in range(a.batch)]
    batch = enc.tokenize(texts, padding=True)
    torch.set_num_threads(1)
    with torch.inference_mode():
        enc.forward(batch)  # warm up
    stop = mp.Event()
    busy = [mp.Process(target=_busy, args=(stop,), daemon=True) for _ in range(a.load)]
    for p in busy:
        p.start()
    times: dict[int, list[float]] = {n: [] for n in counts}
    try:
        for r in range(a.rounds):
            for n in (counts if r % 2 == 0 else counts[::-1]):
                torch.set_num_threads(n)
                with torch.inference_mode():
                    t0 = time.perf_counter()
                    enc.forward(batch)
                    times[n].append(time.perf_counter() - t0)
    finally:
        stop.set()
        for p in busy:
            p.join(5)
    load = os.getloadavg()
    print(f"cores {os.cpu_count()}, extra busy processes {a.load}, load average {load[0]:.2f} {load[1]:.2f}; "
          f"{a.rounds} rounds, batch of {a.batch} texts")
    print("| threads | median ms | min ms | max ms | median / 1 thread |")
    print("|---|---|---|---|---|")
    base = statistics.median(times[counts[0]])
    for n in counts:
        med = statistics.median(times[n])
        print(f"| {n} | {med * 1e3:.1f} | {min(times[n]) * 1e3:.1f} | {max(times[n]) * 1e3:.1f} | "
              f"x{med / base:.2f} |")


if __name__ == "__main__":
    main()
