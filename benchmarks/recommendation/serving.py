"""Recommend latency (p50/p99) and throughput on loopback at several concurrencies, three ways, same model:

  praxon  RecommendationService.Recommend over gRPC (`praxon serve recommendation` in a subprocess: interceptors,
          registry-loaded model, dynamic batching)
  kserve  the same registered model served by kserve's ModelServer (`praxon predictor recommendation` in a
          subprocess), called over Open Inference Protocol v2 gRPC with kserve's InferenceGRPCClient
  raw     the domain Recommender's forward in this process, no RPC: at concurrency c one forward over c histories
          (the floor: what batching could at best reach)

Catalogues: MovieLens-100k's size (1682 items) and a synthetic 1M-item table; the model is randomly initialised
(latency does not depend on the weights' values), registered in a throwaway registry (a fresh PostgreSQL database
and a `weed mini` S3, as in the tests). Every client call is one history of --history items, k = --k.

    .venv/bin/python benchmarks/recommendation/serving.py --kind preferdiff --catalogues ml-100k 1m \
        --concurrency 1 8 64 --requests 200 --requests-1m 64 --threads 1 --csv /tmp/rec_serving.csv
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import os
import socket
import statistics
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CATALOGUES = {"ml-100k": 1682, "1m": 1_000_000}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_tensors(kind: str, n_items: int, dim: int, seed: int = 0):
    from services.recommendation.recommender import MODEL_FORMAT
    from services.recommendation.model import ModelConfig, build_model

    torch.manual_seed(seed)
    mcfg = ModelConfig(kind=kind, n_items=n_items, dim=dim)
    tensors = {"popularity": torch.cat([torch.zeros(1), torch.rand(n_items) * 100])}
    if kind != "popularity":
        tensors.update({f"model.{k}": v for k, v in build_model(mcfg).state_dict().items()})
    config = {"format": MODEL_FORMAT, "model_kind": kind, "model": mcfg.to_dict(),
              "item_ids": [str(i + 1) for i in range(n_items)], "seed": seed}
    return tensors, config


def register(settings, tenant_id: str, name: str, tensors, config) -> None:
    from services.common import db
    from services.common.registry import Registry
    from services.common.store import ArtifactStore
    from services.recommendation.recommender import REGISTRY_KIND

    pool = db.create_pool(settings, max_size=2)
    try:
        reg = Registry(pool, ArtifactStore(settings))
        with pool.connection() as conn:
            job = conn.execute("INSERT INTO jobs (tenant_id, kind, queue, state, params) VALUES "
                               "(%s, 'recommendation.train', 'training', 'RUNNING', '{}') RETURNING id",
                               (tenant_id,)).fetchone()
            reg.stage_model(conn, tenant_id, str(job["id"]), name, tensors, kind=REGISTRY_KIND, config=config,
                            metrics=None, dataset_artifact_id=None, parent_version_ids=[])
            reg.commit_job_outputs(conn, str(job["id"]))
            conn.execute("UPDATE jobs SET state = 'SUCCEEDED', finished_at = now() WHERE id = %s", (job["id"],))
    finally:
        pool.close()


def wait_port(port: int, proc, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"server not listening after {timeout}s:\n{log.read_text()[-3000:]}")


def summary(lat: list[float], wall: float, n: int) -> dict:
    ms = sorted(x * 1000 for x in lat)
    return {"p50_ms": statistics.median(ms), "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
            "rps": n / wall}


async def drive(call, histories: list[list[int]], concurrency: int) -> dict:
    """`concurrency` clients, each sending its next request when its previous one answered."""
    todo = list(range(len(histories)))
    lat: list[float] = []

    async def client():
        while todo:
            i = todo.pop()
            t = time.perf_counter()
            await call(histories[i])
            lat.append(time.perf_counter() - t)
    for h in histories[:concurrency]:  # warm-up: the model is loaded, connections open
        await call(h)
    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return summary(lat, time.perf_counter() - t0, len(histories))


async def bench_praxon(address: str, token: str, name: str, histories, concurrency: int, k: int) -> dict:
    import grpc

    from praxon.common.v1 import common_pb2
    from praxon.recommendation.v1 import recommendation_pb2 as pb
    from praxon.recommendation.v1 import recommendation_pb2_grpc

    md = [("authorization", f"Bearer {token}")]
    async with grpc.aio.insecure_channel(address) as ch:
        stub = recommendation_pb2_grpc.RecommendationServiceStub(ch)
        ref = common_pb2.ModelRef(name=name, version=1)

        async def call(h):
            for _ in range(600):
                try:
                    return await stub.Recommend(pb.RecommendRequest(
                        model=ref, history=pb.History(item_ids=[str(x) for x in h]), k=k), metadata=md, timeout=120)
                except grpc.aio.AioRpcError as err:
                    if err.code() != grpc.StatusCode.UNAVAILABLE:  # the model is loading: retry
                        raise
                    await asyncio.sleep(0.5)
        return await drive(call, histories, concurrency)


async def bench_kserve(port: int, histories, concurrency: int, k: int) -> dict:
    from kserve import InferenceGRPCClient
    from kserve.protocol.infer_type import InferInput, InferRequest

    client = InferenceGRPCClient(f"127.0.0.1:{port}", timeout=120)
    try:
        async def call(h):
            req = InferRequest(model_name="recommendation", infer_inputs=[
                InferInput("history", [1, len(h)], "INT64", list(h)), InferInput("k", [1], "INT32", [k])])
            return await client.infer(req)
        return await drive(call, histories, concurrency)
    finally:
        await client.close()


def bench_raw(rec, histories, concurrency: int, k: int) -> dict:
    ids = [[str(x) for x in h] for h in histories]
    rec.recommend(ids[:concurrency], k=k, exclude_seen=False)
    lat, n = [], 0
    t0 = time.perf_counter()
    for lo in range(0, len(ids), concurrency):
        batch = ids[lo:lo + concurrency]
        t = time.perf_counter()
        rec.recommend(batch, k=k, exclude_seen=False)
        lat += [time.perf_counter() - t] * len(batch)  # each history in the forward waited for all of it
        n += len(batch)
    return summary(lat, time.perf_counter() - t0, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", default="preferdiff", choices=["preferdiff", "sasrec_ce", "popularity"])
    ap.add_argument("--catalogues", nargs="+", default=["ml-100k", "1m"], choices=list(CATALOGUES))
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 64])
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level (ml-100k)")
    ap.add_argument("--requests-1m", type=int, default=64, help="requests per concurrency level (1M items)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--history", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads in every process (OMP_NUM_THREADS for the servers). On busy shared "
                         "cores more than one thread makes a batch-1 forward ~100x slower (measured: 150 ms vs 2 ms)")
    ap.add_argument("--csv", help="also write the rows here")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    from services.common import db
    from services.common.embedded import spawn
    from services.recommendation.serving import build_loaded
    from tests import harness

    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs; model {a.kind} "
          f"dim {a.dim}; k {a.k}; histories of {a.history} items; praxon batching: ServingConfig defaults",
          flush=True)
    tmp = Path(f"/tmp/praxon-rec-bench-{uuid.uuid4().hex[:6]}")
    tmp.mkdir(parents=True)
    url = harness.create_database()
    procs = []
    rows = []
    try:
        with harness.weed_server(tmp) as weed:
            settings = harness.make_settings(url, weed.endpoint, f"{harness.REDIS_URL}/15", bucket="bench")
            settings.extra_services = []
            db.migrate(settings)
            from services.common.store import ArtifactStore

            ArtifactStore(settings).ensure_bucket()
            tenant_id, token = harness.token_for(settings, f"bench-{uuid.uuid4().hex[:6]}")
            env = {**os.environ, **harness.settings_env(settings), "PYTHONPATH": str(ROOT),
                   "OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
            env["PRAXON_JOBS__EXTRA_MODULES"] = "[]"
            rng = np.random.default_rng(0)
            for cat in a.catalogues:
                n_items = CATALOGUES[cat]
                name = f"bench-{cat}"
                t = time.perf_counter()
                tensors, config = model_tensors(a.kind, n_items, a.dim)
                register(settings, tenant_id, name, tensors, config)
                rec = build_loaded(tensors, config, {"kind": "recommendation", "name": name, "version": 1,
                                                     "id": "raw"}).rec
                print(f"# {cat}: {n_items} items registered in {time.perf_counter() - t:.1f}s", flush=True)
                port = free_port()
                log = tmp / f"praxon-{cat}.log"
                svc = spawn([sys.executable, "-m", "services.cli.main", "--log-level", "WARNING", "serve",
                             "recommendation", "--port", str(port)], log,
                            env={**env, "PRAXON_GRPC__PORT": str(port), "PRAXON_METRICS_PORT": "0"})
                procs.append(svc)
                http, gport = free_port(), free_port()
                klog = tmp / f"kserve-{cat}.log"
                ks = spawn([sys.executable, "-m", "services.cli.main", "predictor", "recommendation", "--tenant",
                            tenant_id, "--model", f"{name}:1", "--http-port", str(http), "--grpc-port", str(gport)],
                           klog, env=env)
                procs.append(ks)
                wait_port(port, svc, log)
                wait_port(gport, ks, klog)
                n_req = a.requests if cat == "ml-100k" else a.requests_1m
                for c in a.concurrency:
                    hs = [rng.integers(1, n_items + 1, size=a.history).tolist() for _ in range(max(n_req, c))]
                    for provider in ("praxon", "kserve", "raw"):
                        if provider == "praxon":
                            r = asyncio.run(bench_praxon(f"127.0.0.1:{port}", token, name, hs, c, a.k))
                        elif provider == "kserve":
                            r = asyncio.run(bench_kserve(gport, hs, c, a.k))
                        else:
                            r = bench_raw(rec, hs, c, a.k)
                        rows.append({"catalogue": cat, "provider": provider, "concurrency": c, "requests": len(hs),
                                     **{k_: round(v, 3) for k_, v in r.items()}})
                        print(f"{cat:8} {provider:7} c={c:<3} n={len(hs):<5} p50 {r['p50_ms']:9.2f} ms  "
                              f"p99 {r['p99_ms']:9.2f} ms  {r['rps']:9.1f} req/s", flush=True)
                for p in (svc, ks):
                    p.terminate()
                    p.wait(30)
                rec = tensors = None  # free the 1M-item tables before the next catalogue
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        harness.drop_database(url)

    print("\n| catalogue | concurrency | provider | p50 ms | p99 ms | req/s | req/s vs raw |")
    print("|---|---|---|---|---|---|---|")
    raw = {(r["catalogue"], r["concurrency"]): r["rps"] for r in rows if r["provider"] == "raw"}
    for r in rows:
        print(f"| {r['catalogue']} | {r['concurrency']} | {r['provider']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
              f"{r['rps']:.1f} | {r['rps'] / raw[(r['catalogue'], r['concurrency'])]:.2f} |")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
