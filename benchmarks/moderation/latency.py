"""Moderation serving latency and throughput on loopback: ModerationService.Moderate (gRPC, dynamic batching)
vs the same model in kserve's ModelServer over OIP v2 gRPC (the same ModerationEngine inside), vs the bare forward
pass (the floor), for 64- and 256-token texts at concurrency 1, 8 and 64, for the guard and (--student) the
distilled HarmAug student served by name. Prints p50/p99 latency (ms), texts/s, and ratios to the floor.

    .venv/bin/python benchmarks/moderation/latency.py [--requests 32] [--threads 1] [--csv out.csv]
    .venv/bin/python benchmarks/moderation/latency.py --quick        # a few requests per cell

Every process (the service, the predictor, the floor) runs torch with --threads threads. Each request's text is
unique (every sentence carries its own number), so the encoder's per-text cache never answers. Rows:
  floor/forward   one MiniLM forward over the whole text in this process, one text at a time (the floor)
  floor/engine    decision.moderate_items in this process (chunking + one forward per chunk + heads + decision)
  grpc            ModerationService.Moderate through the real server and interceptors (a subprocess)
  kserve          the same model as a kserve.Model in ModelServer, OIP v2 ModelInfer (a subprocess)
  */student       the same for the distilled student (--student: trained here by the real distillation job)
  proba/teacher, proba/student   whole-text predict_proba in-process, one text at a time (student speed-up)"""
from __future__ import annotations

import argparse
import asyncio
import csv
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests import harness  # noqa: E402 - the project root goes on sys.path first

SIZES = (64, 256)
CONCURRENCY = (1, 8, 64)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# ---------------------------------------------------------------------------------------------- texts
def make_texts(n: int, tokens: int, seed: int) -> list[str]:
    """n unique texts of about `tokens` MiniLM tokens, from seed-set sentences each tagged with its own number."""
    from services.common.minilm import get_base_encoder
    from services.moderation.schema import load_seed_dataset
    from services.moderation.text import split_sentences

    tok = get_base_encoder().tokenizer
    sentences = []
    for r in load_seed_dataset():
        for s in split_sentences(r.text):
            t = r.text[s.start:s.end].rstrip(".!?")
            if 4 <= len(t.split()) <= 30:
                sentences.append(t)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts: list[str] = []
        while True:
            cand = parts + [f"{rng.choice(sentences)} (note {rng.randrange(10**6)})."]
            if parts and len(tok(" ".join(cand), add_special_tokens=False)["input_ids"]) > tokens:
                break
            parts = cand
        out.append(" ".join(parts))
    return out


# ---------------------------------------------------------------------------------------------- runners
async def run_concurrent(fn, texts: list[str], concurrency: int) -> dict:
    lat: list[float] = []
    it = iter(texts)

    async def worker():
        for t in it:
            t0 = time.perf_counter()
            await fn(t)
            lat.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    return {"p50_ms": 1000 * pct(lat, 0.5), "p99_ms": 1000 * pct(lat, 0.99), "texts_per_s": len(lat) / wall,
            "n": len(lat)}


def run_inprocess(fn, texts: list[str]) -> dict:
    lat = []
    t0 = time.perf_counter()
    for t in texts:
        s = time.perf_counter()
        fn(t)
        lat.append(time.perf_counter() - s)
    wall = time.perf_counter() - t0
    return {"p50_ms": 1000 * pct(lat, 0.5), "p99_ms": 1000 * pct(lat, 0.99), "texts_per_s": len(lat) / wall,
            "n": len(lat)}


def grpc_client(address: str, token: str, ref=None):
    import grpc

    from praxon.moderation.v1 import moderation_pb2 as pb
    from praxon.moderation.v1 import moderation_pb2_grpc

    channel = grpc.aio.insecure_channel(address)
    stub = moderation_pb2_grpc.ModerationServiceStub(channel)
    md = (("authorization", f"Bearer {token}"),)

    async def call(text: str):
        return await stub.Moderate(pb.ModerateRequest(prompt=text, model=ref), metadata=md, timeout=300)
    return call, channel


def kserve_client(address: str, token: str):
    from kserve import InferenceGRPCClient
    from kserve.protocol.infer_type import InferInput, InferRequest

    client = InferenceGRPCClient(address, timeout=300, retries=2)
    md = (("authorization", f"Bearer {token}"),)  # outside a cluster the predictor wants its tenant's token

    async def call(text: str):
        req = InferRequest(model_name="moderation", infer_inputs=[InferInput("text", [1], "BYTES", [text.encode()])])
        return await client.infer(req, headers=md)
    return call, client


async def wait_ready(call, what: str, proc, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}; see its log")
        try:
            await call("warm up. The weather is nice today.")
            return
        except Exception as exc:  # noqa: BLE001 - any failure while the server starts means "not ready yet"
            if any(c in str(exc) for c in ("INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED")) or \
                    time.monotonic() > deadline:  # a running server that refuses the call: waiting will not help
                raise SystemExit(f"{what} did not become ready: {exc}") from None
            await asyncio.sleep(0.5)


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=32, help="requests per (size, concurrency) cell (>= concurrency "
                                                              "is raised to 2x concurrency)")
    ap.add_argument("--quick", action="store_true", help="small counts: 8 requests per cell, 2x at c=64 ... ")
    ap.add_argument("--threads", type=int, default=1, help="torch threads in every process")
    ap.add_argument("--max-wait-ms", type=float, default=2.0, help="the service's dynamic batching window")
    ap.add_argument("--batch-workers", type=int, default=0, help="the service's concurrent batches (0: cores / "
                                                                  "threads)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    ap.add_argument("--csv", help="also write the rows here")
    ap.add_argument("--student", action="store_true", help="add teacher vs distilled-student rows (in-process)")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    sizes = [int(x) for x in args.sizes.split(",")]
    concs = [int(x) for x in args.concurrency.split(",")]
    per_cell = (lambda c: max(8, 2 * c) if c > 4 else 8) if args.quick else (lambda c: max(args.requests, 2 * c))

    from services.common import db
    from services.common.embedded import free_port, spawn, stop
    from services.common.settings import Settings

    tmp = Path(tempfile.mkdtemp(prefix="praxon-modbench-"))
    db_url = harness.create_database()
    db.migrate(Settings(database_url=db_url))
    procs = []
    rows: list[dict] = []
    try:
        with harness.weed_server(tmp / "weed") as weed:
            settings = harness.make_settings(db_url, weed.endpoint, f"{harness.REDIS_URL}/13",
                                             f"modbench-{uuid.uuid4().hex[:6]}")
            settings.grpc.max_message_bytes = 8 << 20
            tenant_id, token = harness.token_for(settings, f"bench-{uuid.uuid4().hex[:6]}")
            guard, version = train_guard(settings, tenant_id)
            print(f"guard v{version.version} {version.fingerprint} trained from the seed set", flush=True)
            texts = {n: make_texts(sum(per_cell(c) for c in concs) + 8, n, seed=n) for n in sizes}

            env = {**os.environ, **harness.settings_env(settings), "PYTHONPATH": str(ROOT),
                   "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
            port, kport, khttp = free_port(), free_port(), free_port()
            # `python -m services.moderation` == `praxon serve moderation`; the predictor as `praxon predictor` runs it
            student = train_student_job(settings, tenant_id) if args.student else None
            procs.append(spawn([sys.executable, "-c", "from services.cli.main import main; "
                                "main(['serve', 'platform', 'moderation'])"], tmp / "serve.log",
                               env={**env, "PRAXON_GRPC__PORT": str(port), "PRAXON_LOG_LEVEL": "WARNING",
                                    "PRAXON_MODERATION__MAX_WAIT_MS": str(args.max_wait_ms),
                                    "PRAXON_MODERATION__BATCH_WORKERS": str(args.batch_workers)}))
            procs.append(spawn([sys.executable, "-c", "from services.cli.serve import run_predictor; "
                                "from services.common.settings import Settings; "
                                f"run_predictor(Settings(), 'moderation', '{tenant_id}', 'guard:1', {khttp}, {kport})"],
                               tmp / "predictor.log", env=env))
            kaddr = {"": (f"127.0.0.1:{kport}", procs[-1])}  # suffix -> (address, the predictor process)
            if student is not None:
                sk, sh = free_port(), free_port()
                procs.append(spawn([sys.executable, "-c", "from services.cli.serve import run_predictor; "
                                    "from services.common.settings import Settings; "
                                    f"run_predictor(Settings(), 'moderation', '{tenant_id}', 'guard-student', {sh}, "
                                    f"{sk})"], tmp / "predictor-student.log", env=env))
                kaddr["/student"] = (f"127.0.0.1:{sk}", procs[-1])
            rows += asyncio.run(bench_servers(f"127.0.0.1:{port}", kaddr, token, texts, concs, per_cell, procs[0]))
            rows += bench_floor(guard, texts, per_cell(1))
            if student is not None:
                rows += bench_student(guard, student, texts, per_cell(1))
    finally:
        for p in procs:
            stop(p)
        harness.drop_database(db_url)
    report(rows, args)


def train_guard(settings, tenant_id):
    """The seed-set guard through the real job path (job row, claim, checkpoints, registry), run in-process."""
    from services.common.server import build_app_context
    from services.moderation.guard import GuardModel
    from services.moderation.serving import VersionInfo
    from workers import runtime
    from workers.runner import run_job

    app = build_app_context(settings)
    app.store.ensure_bucket()
    job = app.jobs.submit(tenant_id, "moderation.train_guard", {"model_name": "guard"})
    runtime.configure(settings)
    outcome = run_job(runtime.get_runtime(), str(job["id"]))
    if outcome != "succeeded":
        raise SystemExit(f"guard training {outcome}")
    row = app.registry.resolve(tenant_id, "guard", 1)
    tensors, config = app.registry.load_weights(tenant_id, row)
    guard = GuardModel.from_registry(tensors, config)
    app.pool.close()
    return guard, VersionInfo("guard", 1, str(row["id"]), guard.version)


def train_student_job(settings, tenant_id):
    """The HarmAug student of guard v1 through the real distillation job (a reduced budget), in-process."""
    from services.common.server import build_app_context
    from services.moderation.distill import StudentGuard
    from workers import runtime
    from workers.runner import run_job

    app = build_app_context(settings)
    teacher = app.registry.resolve(tenant_id, "guard", 1)
    job = app.jobs.submit(tenant_id, "moderation.distill", {"teacher_model_version_id": str(teacher["id"]),
                                                            "model_name": "guard-student", "n_augment": 600,
                                                            "epochs": 15, "train_plain": False})
    runtime.configure(settings)
    if run_job(runtime.get_runtime(), str(job["id"])) != "succeeded":
        raise SystemExit("distillation failed")
    row = app.registry.resolve(tenant_id, "guard-student", 1)
    student = StudentGuard.from_registry(*app.registry.load_weights(tenant_id, row))
    app.pool.close()
    print(f"student {student.version} distilled from guard v1", flush=True)
    return student


async def bench_servers(address: str, kaddr: dict, token: str, texts, concs, per_cell, server) -> list[dict]:
    from praxon.common.v1 import common_pb2

    rows = []
    backends = []
    g_channels = []
    for suffix, (kaddress, kproc) in kaddr.items():
        ref = common_pb2.ModelRef(name="guard-student" if suffix else "guard")
        g_call, g_channel = grpc_client(address, token, ref)
        k_call, k_client = kserve_client(kaddress, token)
        await wait_ready(g_call, "ModerationService", server)
        # each predictor's own process: a student predictor that dies must fail here, not wait out the timeout
        await wait_ready(k_call, f"kserve ModelServer{suffix}", kproc)
        backends += [("grpc" + suffix, g_call), ("kserve" + suffix, k_call)]
        g_channels += [g_channel, k_client]
    for n, pool in texts.items():
        offset = 0
        for c in concs:
            k = per_cell(c)
            for name, call in backends:
                batch = pool[offset:offset + k]  # a fresh slice per cell, the same texts for every backend
                await call(pool[-1])  # warm
                res = await run_concurrent(call, batch, c)
                rows.append({"backend": name, "tokens": n, "concurrency": c, **res})
                print(f"  {name:14} {n:4} tok  c={c:<3} p50={res['p50_ms']:8.1f} ms  p99={res['p99_ms']:8.1f} ms  "
                      f"{res['texts_per_s']:7.1f} texts/s", flush=True)
            offset += k
    for ch in g_channels:
        await ch.close()
    return rows


def bench_floor(guard, texts, k: int) -> list[dict]:
    import torch

    from services.moderation.decision import Item, Thresholds, moderate_items

    enc = guard.encoder
    rows = []
    th = Thresholds()
    for n, pool in texts.items():
        sample = pool[-(k + 1):-1]

        def forward(t):
            with torch.inference_mode():
                enc.forward(enc.tokenize([t], padding=False))
        for name, fn in (("floor/forward", forward),
                         ("floor/engine", lambda t: moderate_items(guard, [Item(t, "prompt")], th, batched=True))):
            fn(pool[0])
            enc.clear_cache()
            res = run_inprocess(fn, sample)
            enc.clear_cache()
            rows.append({"backend": name, "tokens": n, "concurrency": 1, **res})
            print(f"  {name:14} {n:4} tok  c=1   p50={res['p50_ms']:8.1f} ms  p99={res['p99_ms']:8.1f} ms  "
                  f"{res['texts_per_s']:7.1f} texts/s", flush=True)
    return rows


def bench_student(guard, student, texts, k: int) -> list[dict]:
    """Teacher vs student whole-text predict_proba, one text at a time, in-process (the per-text speed-up)."""
    rows = []
    for n, pool in texts.items():
        sample = pool[-(k + 1):-1]
        for name, model in (("proba/teacher", guard), ("proba/student", student)):
            guard.encoder.clear_cache()
            res = run_inprocess(lambda t, m=model: m.predict_proba([t], ["prompt"]), sample)
            rows.append({"backend": name, "tokens": n, "concurrency": 1, **res})
        t, s_ = rows[-2], rows[-1]
        print(f"  student vs teacher, {n} tokens: {t['p50_ms'] / s_['p50_ms']:.1f}x faster per text (p50)",
              flush=True)
    return rows


def report(rows: list[dict], args) -> None:
    floor = {(r["tokens"]): r for r in rows if r["backend"] == "floor/forward"}
    print("\n| backend | tokens | concurrency | p50 ms | p99 ms | texts/s | texts/s / floor | texts/s vs kserve |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    kserve = {(r["backend"].replace("kserve", "grpc"), r["tokens"], r["concurrency"]): r for r in rows
              if r["backend"].startswith("kserve")}
    for r in rows:
        f = floor.get(r["tokens"])
        ratio = f"{r['texts_per_s'] / f['texts_per_s']:.2f}x" if f else "-"
        k = kserve.get((r["backend"], r["tokens"], r["concurrency"]))
        vs = f"{r['texts_per_s'] / k['texts_per_s']:.2f}x" if (k and r["backend"].startswith("grpc")) else "-"
        print(f"| {r['backend']} | {r['tokens']} | {r['concurrency']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
              f"{r['texts_per_s']:.1f} | {ratio} | {vs} |")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["backend", "tokens", "concurrency", "p50_ms", "p99_ms", "texts_per_s",
                                               "n"])
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
