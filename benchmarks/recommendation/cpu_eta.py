"""What a training run costs on this machine, read off the training job's own ETA (issue 39): for each setting, a
TrainRun on ml-100k (leave_one_out) runs its first FIRST_REPORT_BATCHES batches under a job context that stops it at
its first progress event, and the event's ETA (batches at the measured pace plus a validation pass scaled from a
timed probe, for every epoch) is printed with the epoch estimate it implies. Nothing is trained to the end.

    .venv/bin/python benchmarks/recommendation/cpu_eta.py              # the settings in the README's table
    .venv/bin/python benchmarks/recommendation/cpu_eta.py --threads 2
"""
from __future__ import annotations

import argparse
import time

SETTINGS = {  # name -> TrainParams fields (the kind's defaults fill the rest)
    "preferdiff, paper defaults (3072-d, batch 256, 150 epochs)": dict(model_kind="preferdiff"),
    "preferdiff, 256-d, 150 epochs": dict(model_kind="preferdiff", dim=256),
    "preferdiff, 64-d, 150 epochs": dict(model_kind="preferdiff", dim=64),
    "sasrec_ce, RecBole defaults (64-d, batch 2048, 300 epochs)": dict(model_kind="sasrec_ce"),
    "sasrec_ce, batch 256, 20 epochs (RESULTS.md)": dict(model_kind="sasrec_ce", batch_size=256, epochs=20),
}


class Stop(Exception):
    pass


class FirstEvent:
    """A job context that keeps the first progress event and stops the run there."""

    def __init__(self):
        self.event = None

    def progress(self, fraction, message="", **metrics):
        self.event = (message, metrics)
        raise Stop

    def check_cancelled(self):
        pass


def duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", help="run the settings whose name contains this")
    a = ap.parse_args()
    import torch

    from services.recommendation.data import build_dataset, load_movielens_100k
    from services.recommendation.params import TrainParams
    from services.recommendation.training import TrainRun

    torch.set_num_threads(a.threads)
    ds = build_dataset(load_movielens_100k(), protocol="leave_one_out")
    print(f"ml-100k leave_one_out, torch threads {a.threads}")
    print("| setting | batches an epoch | first ETA (all epochs) | an epoch | measured in |")
    print("|---|---|---|---|---|")
    for name, fields in SETTINGS.items():
        if a.only and a.only not in name:
            continue
        cfg = TrainParams(dataset_artifact_id="x", **fields)
        run = TrainRun(cfg, ds)
        t0 = time.perf_counter()
        run.setup(None)
        ctx = FirstEvent()
        run.ctx = ctx
        try:
            run.step(0)
        except Stop:
            pass
        took = time.perf_counter() - t0
        if ctx.event is None:
            print(f"| {name} | (fewer than {TrainRun.FIRST_REPORT_BATCHES + 1} batches) | | | {took:.0f} s |")
            continue
        message, metrics = ctx.event
        n_batches = int(message.rpartition("/")[2])
        eta = metrics["eta_s"]
        print(f"| {name} | {n_batches} | {duration(eta)} | {duration(eta / cfg.epochs)} | {took:.0f} s |",
              flush=True)


if __name__ == "__main__":
    main()
