"""Load test of one service, loopback only and bounded in time: a `praxon serve <service>` process (plus a
`praxon worker` for the platform's jobs) with its own PostgreSQL database, Redis database and embedded S3 server,
as tests/harness.py builds them, driven by `--concurrency` client coroutines for `--seconds` (one API token, one
tenant).

    .venv/bin/python benchmarks/load/run.py --service platform --seconds 300      # issue 18: 5 minutes each
    .venv/bin/python benchmarks/load/run.py --service moderation --seconds 20     # a smoke run

Services and their calls:
  platform        GetJob 60%, ListJobs 30%, StartSelfTestJob 10% (steps=1); the per-tenant job quota --job-quota
  moderation      Moderate of a prompt of 8-40 random words (each text new: the encoder's cache does not answer)
                  against a guard registered directly (frozen MiniLM + seeded random linear heads: serving costs
                  what a trained guard's does)
  recommendation  Recommend of a random history (5-50 items) with k=10 against a randomly initialised SASRec-CE
                  over a 2000-item catalogue, registered directly
  generation      Generate of a short random prompt with max_new_tokens=--max-new-tokens (greedy) against a random
                  tiny Llama (2 layers, width 64, a BPE tokenizer trained on a slice of the built-in corpus)
Models are registered the way a job registers one (tests/harness.register_model), without training.

Prints per method: calls, p50/p99 latency, status codes; the server process's RSS over time (baseline after the
warm-up, max, final, growth, and the max of each half of the run: growth that keeps going shows as a second half
above the first); the queue depth: for the platform the tenant's unfinished jobs (which --job-quota bounds), for
the others the RPCs in flight in the server (praxon_grpc_server_in_flight from its metrics endpoint; the engine
batchers' own queues are bounded by max_queued but not exported); and whether every RESOURCE_EXHAUSTED answer
carried a RetryInfo delay (a client so told waits that delay before its next call, unless
--no-honour-retry-info). --max-queued sets the service engine's queue bound (its max_queued setting) so that a
run at a concurrency above it shows the refusals. The per-token request rate limit is off here (as in the
tests): it would cap the calls this script can make. Exit status 1 when a check fails (an INTERNAL/UNKNOWN answer, a RESOURCE_EXHAUSTED without
RetryInfo, more unfinished jobs than the quota, or RSS growth over --rss-bound-mib)."""
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

MIXES = {"platform": {"GetJob": 0.6, "ListJobs": 0.3, "StartSelfTestJob": 0.1},
         "moderation": {"Moderate": 1.0}, "recommendation": {"Recommend": 1.0}, "generation": {"Generate": 1.0}}
WORDS = ("the a to of and in that is for it on with as was at by this be not are from or have an they which one "
         "you had word but what all were when we there can more if out so said about other into than its time "
         "people only new some could these two may first then do any like my now over such our man me even most "
         "made after also did many before must through back years where much your way well down should because "
         "each just those how too little state good very make world still own see men work long get here between "
         "both life being under never day same another know while last might us great old year off come since "
         "against go came right used take three plan shop bomb recipe weather music garden kill help").split()
REC_ITEMS = 2000


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(service: str, settings, port: int, metrics_port: int, args, log: Path) -> subprocess.Popen:
    env = {**os.environ, **harness.settings_env(settings), "PYTHONPATH": str(ROOT),
           "PRAXON_GRPC__HOST": "127.0.0.1", "PRAXON_GRPC__PORT": str(port), "PRAXON_METRICS_PORT": str(metrics_port),
           "PRAXON_GRPC__REQUESTS_PER_SECOND_PER_TOKEN": "0",
           "PRAXON_JOBS__MAX_ACTIVE_PER_TENANT": str(args.job_quota),
           "PRAXON_JOBS__MAX_ACTIVE_PER_TENANT_KIND": str(args.job_quota),
           "PRAXON_LOG_LEVEL": "WARNING", "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    if args.max_queued and service != "platform":
        env[f"PRAXON_{service.upper()}__MAX_QUEUED"] = str(args.max_queued)
    with open(log, "ab") as out:  # the server process itself (no guard), so its pid is the one to measure
        return subprocess.Popen([sys.executable, "-m", "services.cli.main", "serve", service], env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


# ---------------------------------------------------------------------------------------------- models
def register_guard(settings, tenant_id: str) -> None:
    """"guard" v1: the frozen MiniLM encoder with seeded random linear heads (no training; the serving cost is the
    encoder's, whatever the heads' values)."""
    import torch

    from services.moderation.encoder import get_base_encoder
    from services.moderation.guard import GuardModel, LinearHeads, base_config

    torch.manual_seed(0)
    heads = LinearHeads.init()
    for name in ("unsafe_w", "topic_w", "sev_w"):
        getattr(heads, name).normal_(0, 0.05)
    encoder = get_base_encoder()
    tensors, config = GuardModel("frozen_linear", heads, base_config("frozen_linear", encoder, 1e-3),
                                 encoder).to_registry()
    harness.register_model(settings, tenant_id, "guard", tensors, kind="guard/frozen_linear", config=config)


def register_recommender(settings, tenant_id: str) -> None:
    """"recommender" v1: a randomly initialised SASRec-CE over REC_ITEMS items, as run_training registers one."""
    import torch

    from services.recommendation.model import ModelConfig, build_model
    from services.recommendation.recommender import MODEL_FORMAT, REGISTRY_KIND

    torch.manual_seed(0)
    mcfg = ModelConfig(kind="sasrec_ce", n_items=REC_ITEMS, dim=64, max_history=50)
    tensors = {"popularity": torch.cat([torch.zeros(1), torch.randint(0, 50, (REC_ITEMS,)).float()]),
               **{f"model.{k}": v for k, v in build_model(mcfg).state_dict().items()}}
    config = {"format": MODEL_FORMAT, "model_kind": "sasrec_ce", "model": mcfg.to_dict(),
              "item_ids": [f"m{i}" for i in range(REC_ITEMS)], "seed": 0}
    harness.register_model(settings, tenant_id, "recommender", tensors, kind=REGISTRY_KIND, config=config)


def register_language_model(settings, tenant_id: str) -> None:
    """"tiny-llama" v1 (the service's default model name): the generation tests' random tiny Llama."""
    from services.common import hf
    from services.generation import corpus
    from services.generation.training import train_tokenizer
    from tests.generation.conftest import tiny_llama

    tokenizer = train_tokenizer(corpus.builtin_corpus(0, n_retrieval=200, qa_repeats=1), 400)
    tensors, config = hf.from_pretrained_objects(tiny_llama(tokenizer), tokenizer)
    harness.register_model(settings, tenant_id, "tiny-llama", tensors, kind=hf.REGISTRY_KIND, config=config)


REGISTER = {"moderation": register_guard, "recommendation": register_recommender,
            "generation": register_language_model}


def in_flight(metrics_port: int) -> int:
    """RPCs in progress in the server now (the sum of praxon_grpc_server_in_flight over methods)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("praxon_grpc_server_in_flight{")))


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


def words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def make_call(service: str, ch, md, job_ids: list[str], args):
    """call(name, rng) -> awaitable: one request of the service's mix."""
    if service == "moderation":
        from praxon.moderation.v1 import moderation_pb2 as mpb
        from praxon.moderation.v1 import moderation_pb2_grpc

        mod = moderation_pb2_grpc.ModerationServiceStub(ch)
        return lambda name, rng: mod.Moderate(mpb.ModerateRequest(prompt=words(rng, 8, 40)), metadata=md,
                                              timeout=30)
    if service == "recommendation":
        from praxon.recommendation.v1 import recommendation_pb2 as rpb
        from praxon.recommendation.v1 import recommendation_pb2_grpc

        rec = recommendation_pb2_grpc.RecommendationServiceStub(ch)
        return lambda name, rng: rec.Recommend(rpb.RecommendRequest(history=rpb.History(item_indices=[
            rng.randint(1, REC_ITEMS) for _ in range(rng.randint(5, 50))]), k=10), metadata=md, timeout=30)
    if service == "generation":
        from praxon.generation.v1 import generation_pb2 as gpb
        from praxon.generation.v1 import generation_pb2_grpc

        gen = generation_pb2_grpc.GenerationServiceStub(ch)
        return lambda name, rng: gen.Generate(gpb.GenerateRequest(prompt=words(rng, 3, 12), sampling=gpb.SamplingParams(
            max_new_tokens=args.max_new_tokens, temperature=0.0)), metadata=md, timeout=60)
    from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc

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
    return call


async def drive(address: str, token: str, args, proc_pid: int, settings, tenant_id: str, metrics_port: int) -> dict:
    from services.common import db
    from services.common.client import status_details

    md = harness.auth(token)
    lat: dict[str, list[float]] = collections.defaultdict(list)
    codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    exhausted = {"count": 0, "with_retry_info": 0, "reasons": collections.Counter()}
    job_ids: list[str] = []
    rss: list[tuple[float, float]] = []
    depth: list[tuple[float, int]] = []
    mix = MIXES[args.service]
    names, weights = list(mix), list(mix.values())

    async with grpc.aio.insecure_channel(address) as ch:
        call = make_call(args.service, ch, md, job_ids, args)
        if args.service == "platform":
            for _ in range(3):  # jobs for GetJob to read
                job_ids.append((await call("StartSelfTestJob", random.Random(0))).job.id)
        else:  # warm-up: the model loaded (UNAVAILABLE while it loads) and a few batches run
            deadline, done = time.monotonic() + 300, 0
            while done < 3:
                try:
                    await call(names[0], random.Random(-1 - done))
                    done += 1
                except grpc.aio.AioRpcError as err:
                    if err.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(1.0)

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
                        if args.honour_retry_info and d["retry_after_s"]:  # as services.common.client retries
                            await asyncio.sleep(min(d["retry_after_s"], max(0.0, stop_at - time.monotonic())))
                if code == "OK":  # latency of answered calls: a refusal is immediate and would pull p50 down
                    lat[name].append(time.perf_counter() - t)
                codes[name][code] += 1

        def sample_depth() -> int:
            if args.service != "platform":
                return in_flight(metrics_port)
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
    mix = MIXES[args.service]
    total = sum(sum(c.values()) for c in res["codes"].values())
    extra = (f"job quota {args.job_quota}/tenant" if args.service == "platform" else
             f"engine max_queued {args.max_queued or 'default'}" + (
                 f", max_new_tokens {args.max_new_tokens}" if args.service == "generation" else ""))
    print(f"load: {args.service} service, concurrency {args.concurrency}, {res['elapsed']:.1f} s, {total} calls "
          f"({total / res['elapsed']:.1f}/s), mix {mix}, torch threads {args.threads} {extra}")
    print(f"{'method':<18}{'calls':>8}{'p50 ms':>9}{'p99 ms':>9}  status codes (latencies: OK calls)")
    for name in mix:
        lat, n = res["lat"][name], sum(res["codes"][name].values())
        codes = ", ".join(f"{k} {v} ({100 * v / n:.1f}%)" for k, v in res["codes"][name].most_common())
        print(f"{name:<18}{n:>8}{1000 * pct(lat, 0.5):>9.1f}{1000 * pct(lat, 0.99):>9.1f}  {codes}")
        bad = {k for k in res["codes"][name] if k in ("INTERNAL", "UNKNOWN")}
        if bad:
            print(f"FAIL: {name} answered {sorted(bad)}")
            ok = False
    errors = sum(v for c in res["codes"].values() for k, v in c.items() if k != "OK")
    print(f"error rate: {100 * errors / max(total, 1):.2f}% of calls (RESOURCE_EXHAUSTED included)")

    ex = res["exhausted"]
    print(f"over quota: {ex['count']} RESOURCE_EXHAUSTED, {ex['with_retry_info']} with a RetryInfo delay, reasons "
          f"{dict(ex['reasons'])}")
    if ex["count"] == 0 and args.service == "platform":
        print("NOTE: no submit went over the quota (raise --concurrency or lower --job-quota to exercise it)")
    elif ex["with_retry_info"] != ex["count"]:
        print("FAIL: a RESOURCE_EXHAUSTED answer without RetryInfo")
        ok = False

    depth = [d for _, d in res["depth"]]
    if args.service == "platform":
        print(f"unfinished jobs of the tenant (queue depth): max {max(depth)}, mean {sum(depth) / len(depth):.1f}, "
              f"quota {args.job_quota}")
        if max(depth) > args.job_quota:
            print("FAIL: more unfinished jobs than the quota")
            ok = False
    else:
        print(f"RPCs in flight in the server (queue depth): max {max(depth)}, mean {sum(depth) / len(depth):.1f} "
              f"(concurrency {args.concurrency})")

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
    ap.add_argument("--service", choices=list(MIXES), default="platform")
    ap.add_argument("--seconds", "--duration", type=float, default=300.0)
    ap.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads of the server")
    ap.add_argument("--max-new-tokens", type=int, default=8, help="generation: tokens per Generate")
    ap.add_argument("--honour-retry-info", action=argparse.BooleanOptionalAction, default=True,
                    help="a client told RESOURCE_EXHAUSTED waits the RetryInfo delay before its next call, as "
                         "services.common.client does (--no-honour-retry-info: it calls again at once)")
    ap.add_argument("--max-queued", type=int, default=0,
                    help="the service's engine queue bound (its max_queued setting; 0: the default)")
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
            if args.service in REGISTER:
                REGISTER[args.service](settings, tenant_id)
            port, metrics_port = free_port(), free_port()
            server = start_server(args.service, settings, port, metrics_port, args, tmp / "server.log")
            if args.service == "platform":
                worker = harness.Worker(settings, tmp)
            wait_healthy(f"127.0.0.1:{port}", server)
            res = asyncio.run(drive(f"127.0.0.1:{port}", token, args, server.pid, settings, tenant_id,
                                    metrics_port))
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
