"""Job overhead: submit -> done latency and jobs/s through praxon's job system (PostgreSQL row, Celery
message, claim with lease, events, finish) vs a bare Celery task round trip, same broker, one worker each.
"done" is what a client sees: from before submit until it learns the job SUCCEEDED (from the job's event
NOTIFY, as WatchJob learns it), against apply_async .. get for the bare task. "->RUNNING" is from the row's
timestamps (created_at .. started_at).

Both workers run for the whole measurement and the two paths alternate, one job each at a time for latency and
one burst each at a time for throughput, so a shared machine's changing load falls on both alike: the ratios are
of paired measurements. Submits check a job quota, as a deployment's services do (Settings.jobs).

    .venv/bin/python benchmarks/platform/job_overhead.py [--jobs 200] [--latency-jobs 200] [--bursts 3]
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
from contextlib import contextmanager
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests import harness  # noqa: E402


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@contextmanager
def bare_worker(tmp: Path):
    """A bare Celery worker (benchmarks/platform/bare_celery.py) on its own Redis database; yields its task."""
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
        bare_noop.apply_async().get(timeout=120)  # the worker is up
        yield bare_noop
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def measure(args, tmp: Path) -> dict:
    from services.common import db
    from services.common.jobs import EVENTS_CHANNEL, JobQuota, JobStore
    from services.common.queue import make_celery
    from services.common.settings import Settings

    db_url = harness.create_database()
    db.migrate(Settings(database_url=db_url))
    broker = f"{harness.REDIS_URL}/14"
    with harness.weed_server(tmp / "weed") as weed, bare_worker(tmp) as bare_noop:
        settings = harness.make_settings(db_url, weed.endpoint, broker, f"bench-{uuid.uuid4().hex[:6]}")
        # a job quota as deployed (the tests' settings turn it off), raised to let a whole burst in: the check
        # costs the same whatever the limit
        defaults = Settings().jobs
        settings.jobs.max_active_per_tenant = max(defaults.max_active_per_tenant, args.jobs + 1)
        settings.jobs.max_active_per_tenant_kind = max(defaults.max_active_per_tenant_kind, args.jobs + 1)
        settings.extra_services = ["benchmarks.platform.noop_kind:SPEC"]
        from services import catalog

        catalog.load_extra(settings)  # submit() knows the kind
        tenant, _ = harness.token_for(settings, "bench")
        worker = harness.Worker(settings, tmp)
        try:
            pool = db.create_pool(settings, max_size=2)
            quota = JobQuota(settings.jobs.max_active_per_tenant, settings.jobs.max_active_per_tenant_kind)
            store = JobStore(pool, make_celery(settings), quota)  # as a service submits (build_app_context)
            warm = store.submit(tenant, "bench.noop", {})  # the worker is up and warm
            harness.wait_for(lambda: harness.job_row(settings, warm["id"])["state"] == "SUCCEEDED", 180, what="warm-up")
            # latency: one job at a time, from before submit until the client learns it SUCCEEDED, the way WatchJob
            # does (a NOTIFY on the job's events, then its row), against the bare apply_async .. get; alternating
            ids, praxon, bare, submitted = [], [], [], []
            with psycopg.connect(db.database_url(settings), autocommit=True) as listener:
                listener.execute(f"LISTEN {EVENTS_CHANNEL}")
                for _ in range(args.latency_jobs):
                    t0 = time.perf_counter()
                    job_id = str(store.submit(tenant, "bench.noop", {})["id"])
                    submitted.append(time.perf_counter() - t0)
                    ids.append(job_id)
                    while not _succeeded(listener, job_id):
                        pass
                    praxon.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    bare_noop.apply_async().get(timeout=60)
                    bare.append(time.perf_counter() - t0)
            # throughput: bursts, alternating
            praxon_rates, bare_rates, burst_ids = [], [], []
            for _ in range(args.bursts):
                t0 = time.perf_counter()
                burst = [store.submit(tenant, "bench.noop", {})["id"] for _ in range(args.jobs)]
                harness.wait_for(lambda: _all_done(settings, burst), 600, interval=0.01, what="burst")  # noqa: B023
                praxon_rates.append(args.jobs / (time.perf_counter() - t0))
                burst_ids = burst
                t0 = time.perf_counter()
                for r in [bare_noop.apply_async() for _ in range(args.jobs)]:
                    r.get(timeout=600)
                bare_rates.append(args.jobs / (time.perf_counter() - t0))
            with db.connect(settings) as conn:
                rows = conn.execute("SELECT extract(epoch FROM started_at - created_at) AS run FROM jobs "
                                    "WHERE id = ANY(%s)", (ids,)).fetchall()
                # where a burst's time goes: inside run_job (claim .. finish) vs between two jobs (the worker
                # acking, fetching the next message, the task's start)
                spans = conn.execute("SELECT started_at, finished_at FROM jobs WHERE id = ANY(%s) "
                                     "ORDER BY started_at", (burst_ids,)).fetchall()
            trips = database_round_trips(settings, tenant, pool, quota)
            pool.close()
            durable_ms, async_ms = commit_cost_ms(db.database_url(settings))
        finally:
            worker.stop()
            harness.drop_database(db_url)
    run = [float(r["run"]) for r in rows]
    inside = [(r["finished_at"] - r["started_at"]).total_seconds() for r in spans]
    between = [(b["started_at"] - a["finished_at"]).total_seconds() for a, b in zip(spans, spans[1:], strict=False)]
    return {"trips": trips, "submit_ms": 1e3 * statistics.median(submitted), "durable_ms": durable_ms,
            "async_ms": async_ms, "inside_ms": 1e3 * statistics.median(inside),
            "between_ms": 1e3 * statistics.median(between), "running": run, "praxon": praxon, "bare": bare,
            "pair_ratios": [p / b for p, b in zip(praxon, bare, strict=True)],
            "praxon_rates": praxon_rates, "bare_rates": bare_rates}


def database_round_trips(settings, tenant: str, pool, quota, n: int = 50) -> tuple[float, float]:
    """(submit, run_job) round trips to PostgreSQL per no-op job, counted in this process with run_job called
    directly: every statement (Cursor.execute, pool checks included) and every transaction command psycopg sends on
    its own (BEGIN, COMMIT, SET: its private BaseConnection._exec_command; a commit with no transaction open sends
    nothing and is not counted). A count, so a shared machine's load does not move it."""
    from psycopg._connection_base import BaseConnection

    from services.common.jobs import JobStore
    from services.common.queue import make_celery
    from services.common.registry import Registry
    from services.common.store import ArtifactStore
    from workers.runner import run_job
    from workers.runtime import Runtime

    store = ArtifactStore(settings)
    rt = Runtime(settings, pool, JobStore(pool, make_celery(settings), quota), Registry(pool, store), store)
    rt.jobs.enqueue = lambda *a, **k: None  # the worker must not take these: run_job runs them here
    count = [0]
    execute, command = psycopg.Cursor.execute, BaseConnection._exec_command

    def counted_execute(cur, *a, **k):
        count[0] += 1
        return execute(cur, *a, **k)

    def counted_command(conn, *a, **k):
        count[0] += 1
        return command(conn, *a, **k)
    psycopg.Cursor.execute, BaseConnection._exec_command = counted_execute, counted_command
    try:
        ids = [rt.jobs.submit(tenant, "bench.noop", {})["id"] for _ in range(n)]
        submitted = count[0]
        for job_id in ids:
            run_job(rt, str(job_id))
    finally:
        psycopg.Cursor.execute, BaseConnection._exec_command = execute, command
    return submitted / n, (count[0] - submitted) / n


def commit_cost_ms(url: str, n: int = 200) -> tuple[float, float]:
    """(durable, asynchronous) commit of a one-row insert on this database, ms: a job makes two durable commits
    (submit, finish), which a bare Celery round trip does not; on slow disks their fsync is most of the gap."""
    out = []
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_cost (x int)")  # not TEMP: those skip the WAL
        conn.commit()
        for mode in ("on", "off"):
            conn.execute(f"SET synchronous_commit = {mode}")
            conn.commit()
            t0 = time.perf_counter()
            for _ in range(n):
                conn.execute("INSERT INTO bench_commit_cost VALUES (1)")
                conn.commit()
            out.append(1e3 * (time.perf_counter() - t0) / n)
        conn.execute("DROP TABLE bench_commit_cost")
    return out[0], out[1]


def _succeeded(listener, job_id: str) -> bool:
    """Waits for the next event NOTIFY; True once it is this job's and its row says SUCCEEDED."""
    notes = list(listener.notifies(timeout=60, stop_after=1))  # (no query while the generator holds the connection)
    if not notes:
        raise TimeoutError(f"no event for job {job_id} within 60 s")
    return notes[0].payload == job_id and \
        listener.execute("SELECT state FROM jobs WHERE id = %s", (job_id,)).fetchone()[0] == "SUCCEEDED"


def _all_done(settings, ids) -> bool:
    from services.common import db
    with db.connect(settings) as conn:
        return conn.execute("SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND state = 'SUCCEEDED'",
                            (ids,)).fetchone()["n"] == len(ids)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200, help="burst size for throughput")
    ap.add_argument("--bursts", type=int, default=3, help="bursts of each path, alternating")
    ap.add_argument("--latency-jobs", type=int, default=200, help="sequential jobs of each path for latency")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        s = measure(args, Path(d))
    ms = 1e3
    print(f"\n{args.latency_jobs} sequential no-op jobs of each path for latency, alternating; {args.bursts} bursts of "
          f"{args.jobs} of each for throughput, alternating; one worker each")
    print(f"{'path':34} {'->RUNNING p50':>14} {'p99':>8} {'->done p50':>11} {'p99':>8} {'jobs/s':>8}")
    print(f"{'praxon job (row+lease+events)':34} {statistics.median(s['running']) * ms:12.1f}ms "
          f"{pct(s['running'], 0.99) * ms:6.1f}ms {statistics.median(s['praxon']) * ms:9.1f}ms "
          f"{pct(s['praxon'], 0.99) * ms:6.1f}ms {statistics.median(s['praxon_rates']):8.1f}")
    print(f"{'bare Celery task round trip':34} {'-':>14} {'-':>8} {statistics.median(s['bare']) * ms:9.1f}ms "
          f"{pct(s['bare'], 0.99) * ms:6.1f}ms {statistics.median(s['bare_rates']):8.1f}")
    print(f"database round trips per job: submit {s['trips'][0]:.1f}, run_job {s['trips'][1]:.1f}")
    print(f"latency, median: submit returns after {s['submit_ms']:.1f} ms (row committed, message sent)")
    print(f"burst, median per job: {s['inside_ms']:.1f} ms from claim to finish, {s['between_ms']:.1f} ms from one "
          "job's finish to the next one's claim")
    print(f"a durable commit on this database costs {s['durable_ms']:.2f} ms (asynchronous: {s['async_ms']:.2f} ms); "
          f"a job makes two (submit, finish), {2 * (s['durable_ms'] - s['async_ms']):.1f} ms of waiting for the disk "
          "that the bare round trip does not do")
    rate_ratios = [p / b for p, b in zip(s["praxon_rates"], s["bare_rates"], strict=True)]
    print(f"ratio praxon/bare: done p50 x{statistics.median(s['praxon']) / statistics.median(s['bare']):.2f} "
          f"(median of the paired ratios x{statistics.median(s['pair_ratios']):.2f}), throughput "
          f"x{statistics.median(rate_ratios):.2f} (per burst pair: {', '.join(f'x{r:.2f}' for r in rate_ratios)})")


if __name__ == "__main__":
    main()
