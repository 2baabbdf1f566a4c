"""Load test of one service, loopback only and bounded in time: a `praxon serve <service>` process (plus a
`praxon worker` for the jobs of platform, unlearning and design) with its own PostgreSQL database, Redis database
and embedded S3 server, as tests/harness.py builds them, driven by `--concurrency` client coroutines for
`--seconds` (one API token, one tenant).

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
  unlearning      GetUnlearningRecord 40%, ListUnlearningRecords 25%, GetUnlearningReport 25%, StartUnlearningJob
                  10% (one new record id each, certified noisy minimizer, from the latest version) of a certified
                  softmax head that a StartTrainingJob trains up front on a synthetic dataset (UL_RECORDS records,
                  put directly as an artifact); 3 unlearning jobs up front give the reads records; --job-quota
  design          GameOpt campaigns (DESIGN_CAMPAIGNS created up front, each with 8 observations and a finished
                  suggestion): GetCampaign 25%, ListCampaigns 10%, GetSuggestions 20%, Observe of 1-4 new random
                  sequences 20%, ObserveRepeat 15% (a batch sent before, sent again: it must insert nothing),
                  GetCampaignReport 5%, StartSuggestionJob 5% (Hedge, 30 rounds, 2 games); --job-quota
The serving models are registered the way a job registers one (tests/harness.register_model), without training.

Prints per method: calls, p50/p99 latency, status codes; the server process's RSS over time (baseline after the
warm-up, max, final, growth, and the max of each half of the run: growth that keeps going shows as a second half
above the first); the queue depth: for the services with jobs the tenant's unfinished jobs (which --job-quota
bounds), for the others the RPCs in flight in the server (praxon_grpc_server_in_flight from its metrics endpoint;
the engine batchers' own queues are bounded by max_queued but not exported); and whether every RESOURCE_EXHAUSTED
answer carried a RetryInfo delay (a client so told waits that delay before its next call, unless
--no-honour-retry-info). --max-queued sets the service engine's queue bound (its max_queued setting) so that a
run at a concurrency above it shows the refusals. The per-token request rate limit is off here (as in the
tests): it would cap the calls this script can make. For the services with jobs it also prints how their jobs
ended. Exit status 1 when a check fails (an INTERNAL/UNKNOWN answer, a repeated Observe that inserted something, a
RESOURCE_EXHAUSTED without RetryInfo, more unfinished jobs than the quota, or RSS growth over --rss-bound-mib)."""
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
         "moderation": {"Moderate": 1.0}, "recommendation": {"Recommend": 1.0}, "generation": {"Generate": 1.0},
         "unlearning": {"GetUnlearningRecord": 0.4, "ListUnlearningRecords": 0.25, "GetUnlearningReport": 0.25,
                        "StartUnlearningJob": 0.1},
         "design": {"GetCampaign": 0.25, "ListCampaigns": 0.1, "GetSuggestions": 0.2, "Observe": 0.2,
                    "ObserveRepeat": 0.15, "GetCampaignReport": 0.05, "StartSuggestionJob": 0.05}}
JOB_SERVICES = ("platform", "unlearning", "design")  # served with a worker; queue depth = unfinished jobs
WORDS = ("the a to of and in that is for it on with as was at by this be not are from or have an they which one "
         "you had word but what all were when we there can more if out so said about other into than its time "
         "people only new some could these two may first then do any like my now over such our man me even most "
         "made after also did many before must through back years where much your way well down should because "
         "each just those how too little state good very make world still own see men work long get here between "
         "both life being under never day same another know while last might us great old year off come since "
         "against go came right used take three plan shop bomb recipe weather music garden kill help").split()
REC_ITEMS = 2000
# unlearning: the synthetic training set (every StartUnlearningJob forgets one record id not forgotten before, so
# there must be more records than submits; refused submits use one up too)
UL_RECORDS, UL_DIM, UL_CLASSES, UL_MODEL = 10000, 16, 3, "load-head"
# design: campaigns over 6 letters x 6 sites (46656 sequences: random new ones rarely repeat within a run)
DESIGN_CAMPAIGNS, DESIGN_ALPHABET, DESIGN_LENGTH = 8, "ACDEFG", 6


class CheckFailed(Exception):
    """An answer that is OK on the wire but breaks a promise of the API (its name is counted like a status code)."""


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
    if args.max_queued and service not in JOB_SERVICES:
        env[f"PRAXON_{service.upper()}__MAX_QUEUED"] = str(args.max_queued)
    for item in args.server_env:  # e.g. MALLOC_ARENA_MAX=2: what the server's memory does under another setting
        key, _, value = item.partition("=")
        env[key] = value
    with open(log, "ab") as out:  # the server process itself (no guard), so its pid is the one to measure
        return subprocess.Popen([sys.executable, "-m", "services.cli.main", "serve", service], env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


# ---------------------------------------------------------------------------------------------- models
def register_guard(settings, tenant_id: str) -> None:
    """"guard" v1: the frozen MiniLM encoder with seeded random linear heads (no training; the serving cost is the
    encoder's, whatever the heads' values)."""
    import torch

    from services.common.minilm import get_base_encoder
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


# ---------------------------------------------------------------------------------------------- jobs' data
def ul_record(i: int) -> str:
    return f"rec-{i:05d}"


def put_dataset(settings, tenant_id: str) -> str:
    """The unlearning training set (UL_RECORDS separable blobs, record ids rec-00000...) as an artifact, put
    directly: the unlearning service does not serve uploads (the platform does). Returns the artifact id."""
    from services.common import db
    from services.common.registry import Registry
    from services.common.store import ArtifactStore
    from services.unlearning.data import DATASET_CONTENT_TYPE, encode_dataset
    from services.unlearning.synthetic import blobs

    X, y = blobs(UL_RECORDS, UL_DIM, UL_CLASSES, seed=3)
    data = encode_dataset(X.float(), y, [ul_record(i) for i in range(UL_RECORDS)])
    store = ArtifactStore(settings)
    store.ensure_bucket()
    pool = db.create_pool(settings, max_size=1)
    try:
        with db.connect(settings) as conn:
            row = Registry(pool, store).put_artifact(conn, tenant_id, "load-train.safetensors", data,
                                                     DATASET_CONTENT_TYPE)
        return str(row["id"])
    finally:
        pool.close()


def wait_jobs(settings, job_ids: list[str], timeout: float = 600) -> None:
    """Until each job is finished; the setup's jobs must succeed (the mix reads what they make)."""
    for job_id in job_ids:
        row = harness.wait_for(lambda j=job_id: (r := harness.job_row(settings, j))["state"] in (
            "SUCCEEDED", "FAILED", "CANCELLED") and r, timeout, interval=0.3, what=f"job {job_id}")
        if row["state"] != "SUCCEEDED":
            raise RuntimeError(f"setup job {job_id} {row['state']}: {row['error_reason']} {row['error_message']}")


def design_sequence(rng: random.Random) -> str:
    return "".join(rng.choice(DESIGN_ALPHABET) for _ in range(DESIGN_LENGTH))


def design_score(seq: str) -> float:
    """The lab's measurement: a fixed function of the sequence (additive plus one pairwise term), so a batch sent
    again carries the same values and must be a no-op, whichever client sent it first."""
    additive = sum(DESIGN_ALPHABET.index(c) * (1 + i % 3) for i, c in enumerate(seq))
    return float(additive + 4.0 * (seq[1] == seq[-2]))


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


def make_call(service: str, ch, md, state: dict, args):
    """call(name, rng) -> awaitable: one request of the service's mix. `state` holds what the calls share (ids
    to read, the next record to forget, the batches sent); the coroutines run on one event loop, so a read and
    an update of it with no await between them need no lock."""
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
    if service == "unlearning":
        from praxon.common.v1 import common_pb2
        from praxon.unlearning.v1 import unlearning_pb2 as upb
        from praxon.unlearning.v1 import unlearning_pb2_grpc

        ul, records = unlearning_pb2_grpc.UnlearningServiceStub(ch), state["records"]

        async def unlearning_call(name: str, rng: random.Random):
            if name == "GetUnlearningRecord":
                return await ul.GetUnlearningRecord(upb.GetUnlearningRecordRequest(record_id=rng.choice(records)),
                                                    metadata=md, timeout=30)
            if name == "ListUnlearningRecords":
                return await ul.ListUnlearningRecords(upb.ListUnlearningRecordsRequest(page_size=20), metadata=md,
                                                      timeout=30)
            if name == "GetUnlearningReport":
                return await ul.GetUnlearningReport(upb.GetUnlearningReportRequest(record_id=rng.choice(records)),
                                                    metadata=md, timeout=30)
            # a data-subject request: one record not forgotten before, from the model's latest version
            n = state["next_record"]
            state["next_record"] += 1
            r = await ul.StartUnlearningJob(upb.StartUnlearningJobRequest(
                model=common_pb2.ModelRef(name=UL_MODEL), forget_record_ids=[ul_record(n)],
                method=upb.METHOD_CERTIFIED_NOISY_MINIMIZER, seed=n, reason=f"load DSR {n}"), metadata=md, timeout=30)
            if len(records) < 1000:
                records.append(r.record_id)
            return r
        return unlearning_call
    if service == "design":
        from praxon.design.v1 import design_pb2 as dpb
        from praxon.design.v1 import design_pb2_grpc

        design, campaigns, sent = design_pb2_grpc.DesignServiceStub(ch), state["campaigns"], state["sent"]

        async def design_call(name: str, rng: random.Random):
            cid = rng.choice(campaigns)
            if name == "GetCampaign":
                return await design.GetCampaign(dpb.GetCampaignRequest(campaign_id=cid), metadata=md, timeout=30)
            if name == "ListCampaigns":
                return await design.ListCampaigns(dpb.ListCampaignsRequest(page_size=20), metadata=md, timeout=30)
            if name == "GetSuggestions":  # the latest finished batch (each campaign has one from the setup)
                return await design.GetSuggestions(dpb.GetSuggestionsRequest(campaign_id=cid), metadata=md,
                                                   timeout=30)
            if name == "GetCampaignReport":
                return await design.GetCampaignReport(dpb.GetCampaignReportRequest(campaign_id=cid), metadata=md,
                                                      timeout=30)
            if name == "StartSuggestionJob":  # small: the GP fit on the campaign's observations is the cost
                return await design.StartSuggestionJob(dpb.StartSuggestionJobRequest(
                    campaign_id=cid, solver=dpb.EQUILIBRIUM_SOLVER_HEDGE, rounds=30, games=2,
                    seed=rng.randrange(1 << 31)), metadata=md, timeout=30)
            if name == "ObserveRepeat":  # a client retrying a batch: every measurement already recorded
                cid, obs = rng.choice(sent)
                r = await design.Observe(dpb.ObserveRequest(campaign_id=cid, observations=obs), metadata=md,
                                         timeout=30)
                if r.inserted:
                    raise CheckFailed("NOT_IDEMPOTENT")
                return r
            seqs = [design_sequence(rng) for _ in range(rng.randint(1, 4))]
            obs = [dpb.Observation(sequence=q, value=design_score(q)) for q in seqs]
            r = await design.Observe(dpb.ObserveRequest(campaign_id=cid, observations=obs), metadata=md, timeout=30)
            if len(sent) < 1000:  # keep at most 1000 batches to repeat (later ones replace random ones)
                sent.append((cid, obs))
            else:
                sent[rng.randrange(len(sent))] = (cid, obs)
            return r
        return design_call
    from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc

    stub, job_ids = jobs_pb2_grpc.JobServiceStub(ch), state["job_ids"]

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


async def setup_unlearning(call, ch, md, settings, tenant_id: str) -> None:
    """The model to forget from: a certified softmax head trained by a StartTrainingJob on the dataset; then 3
    unlearning jobs, finished, so that the reads have records with outcomes."""
    from praxon.unlearning.v1 import unlearning_pb2 as upb
    from praxon.unlearning.v1 import unlearning_pb2_grpc

    ds = await asyncio.to_thread(put_dataset, settings, tenant_id)
    job = (await unlearning_pb2_grpc.UnlearningServiceStub(ch).StartTrainingJob(upb.StartTrainingJobRequest(
        dataset_artifact_id=ds, kind=upb.MODEL_KIND_SOFTMAX_L2, name=UL_MODEL, mu=0.05, epsilon=1.0, delta=1e-5,
        seed=0), metadata=md, timeout=30)).job
    await asyncio.to_thread(wait_jobs, settings, [job.id])
    jobs = [(await call("StartUnlearningJob", random.Random(0))).job.id for _ in range(3)]
    await asyncio.to_thread(wait_jobs, settings, jobs)


async def setup_design(ch, md, state: dict, settings) -> None:
    """DESIGN_CAMPAIGNS campaigns, each told 8 measured sequences and asked once (a finished suggestion job, so
    that GetSuggestions has a batch to return)."""
    from praxon.design.v1 import design_pb2 as dpb
    from praxon.design.v1 import design_pb2_grpc

    design, rng, jobs = design_pb2_grpc.DesignServiceStub(ch), random.Random(0), []
    for i in range(DESIGN_CAMPAIGNS):
        cid = (await design.CreateCampaign(dpb.CreateCampaignRequest(
            name=f"load-{i}", alphabet=DESIGN_ALPHABET, length=DESIGN_LENGTH, batch_size=4,
            direction=dpb.DIRECTION_MAXIMIZE), metadata=md, timeout=30)).campaign.id
        state["campaigns"].append(cid)
        obs = [dpb.Observation(sequence=q, value=design_score(q)) for q in (design_sequence(rng) for _ in range(8))]
        await design.Observe(dpb.ObserveRequest(campaign_id=cid, observations=obs), metadata=md, timeout=30)
        state["sent"].append((cid, obs))
        jobs.append((await design.StartSuggestionJob(dpb.StartSuggestionJobRequest(
            campaign_id=cid, solver=dpb.EQUILIBRIUM_SOLVER_HEDGE, rounds=30, games=2, seed=i), metadata=md,
            timeout=30)).job.id)
    await asyncio.to_thread(wait_jobs, settings, jobs)


def job_outcomes(settings, tenant_id: str) -> list[dict]:
    """The tenant's jobs by kind, state and error reason, at the end of the run."""
    from services.common import db

    with db.connect(settings) as conn:
        return conn.execute("SELECT kind, state, coalesce(error_reason, '') AS reason, count(*) AS n FROM jobs "
                            "WHERE tenant_id = %s GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC", (tenant_id,)).fetchall()


async def drive(address: str, token: str, args, proc_pid: int, settings, tenant_id: str, metrics_port: int) -> dict:
    from services.common import db
    from services.common.client import status_details

    md = harness.auth(token)
    lat: dict[str, list[float]] = collections.defaultdict(list)
    codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    exhausted = {"count": 0, "with_retry_info": 0, "reasons": collections.Counter()}
    job_ids: list[str] = []
    state = {"job_ids": job_ids, "records": [], "next_record": 0, "campaigns": [], "sent": []}
    rss: list[tuple[float, float]] = []
    depth: list[tuple[float, int]] = []
    mix = MIXES[args.service]
    names, weights = list(mix), list(mix.values())

    async with grpc.aio.insecure_channel(address) as ch:
        call = make_call(args.service, ch, md, state, args)
        if args.service == "platform":
            for _ in range(3):  # jobs for GetJob to read
                job_ids.append((await call("StartSelfTestJob", random.Random(0))).job.id)
        elif args.service == "unlearning":
            await setup_unlearning(call, ch, md, settings, tenant_id)
        elif args.service == "design":
            await setup_design(ch, md, state, settings)
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
                except CheckFailed as err:
                    code = str(err)
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
            if args.service not in JOB_SERVICES:
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
    jobs = await asyncio.to_thread(job_outcomes, settings, tenant_id) if args.service in JOB_SERVICES else []
    return {"lat": lat, "codes": codes, "exhausted": exhausted, "rss": rss, "depth": depth, "elapsed": elapsed,
            "jobs": jobs}


def report(res: dict, args) -> bool:
    ok = True
    mix = MIXES[args.service]
    total = sum(sum(c.values()) for c in res["codes"].values())
    extra = (f"job quota {args.job_quota}/tenant" if args.service in JOB_SERVICES else
             f"engine max_queued {args.max_queued or 'default'}" + (
                 f", max_new_tokens {args.max_new_tokens}" if args.service == "generation" else ""))
    print(f"load: {args.service} service, concurrency {args.concurrency}, {res['elapsed']:.1f} s, {total} calls "
          f"({total / res['elapsed']:.1f}/s), mix {mix}, torch threads {args.threads} {extra}")
    w = max(18, 2 + max(map(len, mix)))  # the method column fits the longest name
    print(f"{'method':<{w}}{'calls':>8}{'p50 ms':>9}{'p99 ms':>9}  status codes (latencies: OK calls)")
    for name in mix:
        lat, n = res["lat"][name], sum(res["codes"][name].values())
        codes = ", ".join(f"{k} {v} ({100 * v / n:.1f}%)" for k, v in res["codes"][name].most_common())
        print(f"{name:<{w}}{n:>8}{1000 * pct(lat, 0.5):>9.1f}{1000 * pct(lat, 0.99):>9.1f}  {codes}")
        bad = {k for k in res["codes"][name] if k in ("INTERNAL", "UNKNOWN", "NOT_IDEMPOTENT")}
        if bad:
            print(f"FAIL: {name} answered {sorted(bad)}")
            ok = False
    errors = sum(v for c in res["codes"].values() for k, v in c.items() if k != "OK")
    print(f"error rate: {100 * errors / max(total, 1):.2f}% of calls (RESOURCE_EXHAUSTED included)")

    ex = res["exhausted"]
    print(f"over quota: {ex['count']} RESOURCE_EXHAUSTED, {ex['with_retry_info']} with a RetryInfo delay, reasons "
          f"{dict(ex['reasons'])}")
    if ex["count"] == 0 and args.service in JOB_SERVICES:
        print("NOTE: no submit went over the quota (raise --concurrency or lower --job-quota to exercise it)")
    elif ex["with_retry_info"] != ex["count"]:
        print("FAIL: a RESOURCE_EXHAUSTED answer without RetryInfo")
        ok = False

    depth = [d for _, d in res["depth"]]
    if args.service in JOB_SERVICES:
        print(f"unfinished jobs of the tenant (queue depth): max {max(depth)}, mean {sum(depth) / len(depth):.1f}, "
              f"quota {args.job_quota}")
        if max(depth) > args.job_quota:
            print("FAIL: more unfinished jobs than the quota")
            ok = False
        print("jobs of the tenant at the end (setup included): " + ", ".join(
            f"{j['kind']} {j['state']}{' ' + j['reason'] if j['reason'] else ''} {j['n']}" for j in res["jobs"]))
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
    ap.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment variable for the server process only (repeatable; it overrides the "
                         "script's own, e.g. MALLOC_ARENA_MAX=2)")
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
            if args.service in JOB_SERVICES:
                worker = harness.Worker(settings, tmp)
            wait_healthy(f"127.0.0.1:{port}", server)
            res = asyncio.run(drive(f"127.0.0.1:{port}", token, args, server.pid, settings, tenant_id,
                                    metrics_port))
            ok = report(res, args)
        except BaseException:  # the logs go with the temporary folder: show their ends first
            for log in sorted(tmp.glob("*.log")):
                print(f"--- {log.name} (last 40 lines)\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:]))
            raise
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
