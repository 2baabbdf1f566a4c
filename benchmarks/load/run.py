"""Load test of the platform service, loopback only and bounded in time: a `praxon serve platform` process and a
`praxon worker` (own PostgreSQL database, own Redis database, an embedded S3 server, as tests/harness.py builds
them), driven by `--concurrency` client coroutines for `--seconds` with a mix of GetJob, ListJobs and
StartSelfTestJob calls (one API token, one tenant).

    .venv/bin/python benchmarks/load/run.py --seconds 300            # the full run (issue 18: 5 minutes)
    .venv/bin/python benchmarks/load/run.py --seconds 20             # a smoke run

Prints per method: calls, p50/p99 latency, status codes; the server process's RSS over time (baseline after the
warm-up, max, final, growth, and the max of each half of the run: growth that keeps going shows as a second half
above the first); the tenant's unfinished jobs over time (the job queue depth, which the per-tenant quota
--job-quota bounds); and whether every submit over the quota got RESOURCE_EXHAUSTED with a RetryInfo delay.
The per-token request rate limit is off here (as in the tests): it would cap the calls this script can make; the
quota is what the run checks. Exit status 1 when a check fails (an INTERNAL/UNKNOWN answer, a RESOURCE_EXHAUSTED
without RetryInfo, more unfinished jobs than the quota, or RSS growth over --rss-bound-mib)."""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from tests import harness  # noqa: E402

MIX = {"GetJob": 0.6, "ListJobs": 0.3, "StartSelfTestJob": 0.1}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(settings, port: int, quota: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, **harness.settings_env(settings), "PYTHONPATH": str(ROOT),
           "PRAXON_GRPC__HOST": "127.0.0.1", "PRAXON_GRPC__PORT": str(port),
           "PRAXON_GRPC__REQUESTS_PER_SECOND_PER_TOKEN": "0",
           "PRAXON_JOBS__MAX_ACTIVE_PER_TENANT": str(quota), "PRAXON_JOBS__MAX_ACTIVE_PER_TENANT_KIND": str(quota),
           "PRAXON_LOG_LEVEL": "WARNING"}
    with open(log, "ab") as out:  # the server process itself (no guard), so its pid is the one to measure
        return subprocess.Popen([sys.executable, "-m", "services.cli.main", "serve", "platform"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def wait_healthy(address: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with grpc.insecure_channel(address) as ch:
                r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
        except grpc.RpcError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the server did not become healthy")


async def drive(address: str, token: str, args, proc_pid: int, settings, tenant_id: str) -> dict:
    from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc

    from services.common import db
    from services.common.client import status_details

    md = harness.auth(token)
    lat: dict[str, list[float]] = collections.defaultdict(list)
    codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    exhausted = {"count": 0, "with_retry_info": 0, "reasons": collections.Counter()}
    job_ids: list[str] = []
    rss: list[tuple[float, float]] = []
    depth: list[tuple[float, int]] = []
    names, weights = list(MIX), list(MIX.values())

    async with grpc.aio.insecure_channel(address) as ch:
        stub = jobs_pb2_grpc.JobServiceStub(ch)

        async def call(name: str, rng: random.Random):
            if name == "GetJob":
                return await stub.GetJob(jobs_pb2.GetJobRequest(job_id=rng.choice(job_ids)), metadata=md, timeout=30)
            if name == "ListJobs":
                return await stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=20), metadata=md, timeout=30)
            r = await stub.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=1, step_seconds=0), metadata=md,
                                            timeout=30)
            if len(job_ids) < 1000:
                job_ids.append(r.job.id)
            return r

        for _ in range(3):  # jobs for GetJob to read
            job_ids.append((await call("StartSelfTestJob", random.Random(0))).job.id)

        t0 = time.monotonic()
        stop_at = t0 + args.seconds

        async def client(i: int):
            rng = random.Random(args.seed * 1000 + i)
            while time.monotonic() < stop_at:
                name = rng.choices(names, weights)[0]
                t = time.perf_counter()
                try:
                    await call(name, rng)
                    code = "OK"
                except grpc.aio.AioRpcError as err:
                    code = err.code().name
                    if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        d = status_details(err)
                        exhausted["count"] += 1
                        exhausted["with_retry_info"] += d["retry_after_s"] is not None and d["retry_after_s"] > 0
                        exhausted["reasons"][d["reason"]] += 1
                lat[name].append(time.perf_counter() - t)
                codes[name][code] += 1

        def sample_depth() -> int:
            with db.connect(settings) as conn:
                return conn.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND state IN "
                                    "('QUEUED', 'RUNNING')", (tenant_id,)).fetchone()["n"]

        async def sampler():
            while time.monotonic() < stop_at:
                now = time.monotonic() - t0
                rss.append((now, rss_mib(proc_pid)))
                depth.append((now, await asyncio.to_thread(sample_depth)))
                await asyncio.sleep(args.sample_s)

        await asyncio.gather(sampler(), *(client(i) for i in range(args.concurrency)))
        elapsed = time.monotonic() - t0
    return {"lat": lat, "codes": codes, "exhausted": exhausted, "rss": rss, "depth": depth, "elapsed": elapsed}


def report(res: dict, args) -> bool:
    ok = True
    total = sum(sum(c.values()) for c in res["codes"].values())
    print(f"load: platform service, concurrency {args.concurrency}, {res['elapsed']:.1f} s, {total} calls "
          f"({total / res['elapsed']:.0f}/s), mix {MIX}, job quota {args.job_quota}/tenant")
    print(f"{'method':<18}{'calls':>8}{'p50 ms':>9}{'p99 ms':>9}  status codes")
    for name in MIX:
        lat = res["lat"][name]
        codes = ", ".join(f"{k} {v} ({100 * v / len(lat):.1f}%)" for k, v in res["codes"][name].most_common())
        print(f"{name:<18}{len(lat):>8}{1000 * pct(lat, 0.5):>9.1f}{1000 * pct(lat, 0.99):>9.1f}  {codes}")
        bad = {k for k in res["codes"][name] if k in ("INTERNAL", "UNKNOWN")}
        if bad:
            print(f"FAIL: {name} answered {sorted(bad)}")
            ok = False
    errors = sum(v for c in res["codes"].values() for k, v in c.items() if k != "OK")
    print(f"error rate: {100 * errors / max(total, 1):.2f}% of calls (RESOURCE_EXHAUSTED included)")

    ex = res["exhausted"]
    print(f"over quota: {ex['count']} RESOURCE_EXHAUSTED, {ex['with_retry_info']} with a RetryInfo delay, reasons "
          f"{dict(ex['reasons'])}")
    if ex["count"] == 0:
        print("NOTE: no submit went over the quota (raise --concurrency or lower --job-quota to exercise it)")
    elif ex["with_retry_info"] != ex["count"]:
        print("FAIL: a RESOURCE_EXHAUSTED answer without RetryInfo")
        ok = False

    depth = [d for _, d in res["depth"]]
    print(f"unfinished jobs of the tenant (queue depth): max {max(depth)}, mean {sum(depth) / len(depth):.1f}, "
          f"quota {args.job_quota}")
    if max(depth) > args.job_quota:
        print("FAIL: more unfinished jobs than the quota")
        ok = False

    rss = res["rss"]
    warm = [r for t, r in rss if t >= min(5.0, args.seconds / 4)] or [r for _, r in rss]
    base, top, last = warm[0], max(warm), warm[-1]
    half = len(warm) // 2
    first, second = max(warm[:half] or warm), max(warm[half:])
    print(f"server RSS MiB: baseline {base:.1f} (after warm-up), max {top:.1f}, final {last:.1f}, growth "
          f"{top - base:+.1f} (bound {args.rss_bound_mib}); max of first half {first:.1f}, second half {second:.1f}")
    step = max(1, len(rss) // 10)
    print("RSS over time: " + ", ".join(f"{t:.0f}s {r:.0f}" for t, r in rss[::step]))
    if top - base > args.rss_bound_mib:
        print("FAIL: RSS grew beyond the bound")
        ok = False
    print("result:", "PASS" if ok else "FAIL")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--job-quota", type=int, default=20, help="unfinished jobs per tenant (and per kind)")
    ap.add_argument("--rss-bound-mib", type=float, default=64.0, help="largest RSS growth after warm-up")
    ap.add_argument("--sample-s", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from services.common import db
    from services.common.embedded import free_port
    from services.common.settings import Settings

    db_url = harness.create_database()
    db.migrate(Settings(database_url=db_url))
    redis_db = harness.claim_redis_db()
    server = worker = None
    with tempfile.TemporaryDirectory() as tmp_name, harness.weed_server(Path(tmp_name) / "weed") as weed:
        tmp = Path(tmp_name)
        try:
            settings = harness.make_settings(db_url, weed.endpoint, f"{harness.REDIS_URL}/{redis_db}",
                                             f"load-{uuid.uuid4().hex[:6]}")
            tenant_id, token = harness.token_for(settings, "load")
            port = free_port()
            server = start_server(settings, port, args.job_quota, tmp / "server.log")
            worker = harness.Worker(settings, tmp)
            wait_healthy(f"127.0.0.1:{port}", server)
            res = asyncio.run(drive(f"127.0.0.1:{port}", token, args, server.pid, settings, tenant_id))
            ok = report(res, args)
        finally:
            if worker is not None:
                worker.stop()
            if server is not None and server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
                try:
                    server.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, signal.SIGKILL)
            harness.release_broker(settings)
            harness.drop_database(db_url)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
