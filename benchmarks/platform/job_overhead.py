"""Job overhead: submit -> RUNNING latency and jobs/s through praxon's job system (PostgreSQL row, Celery
message, claim with lease, events, finish) vs a bare Celery task round trip, same broker, one worker each.

    .venv/bin/python benchmarks/platform/job_overhead.py [--jobs 200]
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests import harness  # noqa: E402


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def spine(args, tmp: Path) -> dict:
    from services.common import db
    from services.common.jobs import JobStore
    from services.common.queue import make_celery
    from services.common.settings import Settings

    db_url = harness.create_database()
    db.migrate(Settings(database_url=db_url))
    broker = f"{harness.REDIS_URL}/14"
    with harness.weed_server(tmp / "weed") as weed:
        settings = harness.make_settings(db_url, weed.endpoint, broker, f"bench-{uuid.uuid4().hex[:6]}")
        settings.extra_services = ["benchmarks.platform.noop_kind:SPEC"]
        from services import catalog

        catalog.load_extra(settings)  # submit() knows the kind
        tenant, _ = harness.token_for(settings, "bench")
        worker = harness.Worker(settings, tmp)
        try:
            pool = db.create_pool(settings, max_size=2)
            store = JobStore(pool, make_celery(settings))
            warm = store.submit(tenant, "bench.noop", {})  # the worker is up and warm
            harness.wait_for(lambda: harness.job_row(settings, warm["id"])["state"] == "SUCCEEDED", 180, what="warm-up")
            # latency: one job at a time
            ids = []
            for _ in range(args.latency_jobs):
                job = store.submit(tenant, "bench.noop", {})
                ids.append(job["id"])
                harness.wait_for(lambda: harness.job_row(settings, job["id"])["state"] == "SUCCEEDED", 60,  # noqa: B023
                                 interval=0.002, what="job")
            # throughput: a burst
            t0 = time.perf_counter()
            burst = [store.submit(tenant, "bench.noop", {})["id"] for _ in range(args.jobs)]
            harness.wait_for(lambda: _all_done(settings, burst), 600, interval=0.05, what="burst")
            burst_s = time.perf_counter() - t0
            with db.connect(settings) as conn:
                rows = conn.execute("SELECT extract(epoch FROM started_at - created_at) AS run, "
                                    "extract(epoch FROM finished_at - created_at) AS done FROM jobs "
                                    "WHERE id = ANY(%s)", (ids,)).fetchall()
            pool.close()
        finally:
            worker.stop()
            harness.drop_database(db_url)
    run = [float(r["run"]) for r in rows]
    done = [float(r["done"]) for r in rows]
    return {"running_p50": statistics.median(run), "running_p99": pct(run, 0.99),
            "done_p50": statistics.median(done), "done_p99": pct(done, 0.99), "jobs_per_s": args.jobs / burst_s}


def _all_done(settings, ids) -> bool:
    from services.common import db
    with db.connect(settings) as conn:
        return conn.execute("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND state = 'SUCCEEDED'",
                            (ids,)).fetchone()["n"] == len(ids)


def bare(args, tmp: Path) -> dict:
    broker = f"{harness.REDIS_URL}/13"
    env = {**os.environ, "BENCH_BROKER": broker, "PYTHONPATH": str(ROOT)}
    log = open(tmp / "bare.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "benchmarks.platform.bare_celery", "worker",
                             "--concurrency=1", "--pool=prefork", "--without-gossip", "--without-mingle",
                             "--without-heartbeat", "--loglevel=WARNING"], env=env, stdout=log, stderr=log,
                            start_new_session=True)
    try:
        os.environ["BENCH_BROKER"] = broker
        from benchmarks.platform.bare_celery import bare_noop
        bare_noop.apply_async().get(timeout=120)  # worker is up
        lat = []
        for _ in range(args.latency_jobs):
            s = time.perf_counter()
            bare_noop.apply_async().get(timeout=60)
            lat.append(time.perf_counter() - s)
        t0 = time.perf_counter()
        results = [bare_noop.apply_async() for _ in range(args.jobs)]
        for r in results:
            r.get(timeout=600)
        return {"done_p50": statistics.median(lat), "done_p99": pct(lat, 0.99),
                "jobs_per_s": args.jobs / (time.perf_counter() - t0)}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200, help="burst size for throughput")
    ap.add_argument("--latency-jobs", type=int, default=100, help="sequential jobs for latency")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        s = spine(args, Path(d))
        b = bare(args, Path(d))
    print(f"\n{args.latency_jobs} sequential no-op jobs for latency, a burst of {args.jobs} for throughput; one worker")
    print(f"{'path':34} {'->RUNNING p50':>14} {'p99':>8} {'->done p50':>11} {'p99':>8} {'jobs/s':>8}")
    print(f"{'praxon job (row+lease+events)':34} {s['running_p50'] * 1e3:12.1f}ms {s['running_p99'] * 1e3:6.1f}ms "
          f"{s['done_p50'] * 1e3:9.1f}ms {s['done_p99'] * 1e3:6.1f}ms {s['jobs_per_s']:8.1f}")
    print(f"{'bare Celery task round trip':34} {'-':>14} {'-':>8} {b['done_p50'] * 1e3:9.1f}ms "
          f"{b['done_p99'] * 1e3:6.1f}ms {b['jobs_per_s']:8.1f}")
    print(f"ratio praxon/bare: done p50 x{s['done_p50'] / b['done_p50']:.2f}, "
          f"throughput x{s['jobs_per_s'] / b['jobs_per_s']:.2f}")


if __name__ == "__main__":
    main()
