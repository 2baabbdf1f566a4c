"""Generation throughput through the live gRPC service at concurrency 1, 8, 32, in the same run as the engine in this
process, transformers' sequential `generate` and one left-padded static `generate` batch, on the same model and
prompts (greedy, EOS ignored, every request --new-tokens tokens; all requests of a cell sent at once).

    grpc-stream  GenerateStream through `praxon serve generation` (a subprocess on loopback: interceptors, token
                 auth, the registry-loaded model, its Engine), called with grpc.aio from this process; one
                 message per token
    grpc-unary   Generate through the same server (the whole answer in one message)
    engine       services.generation.engine.Engine in this process (no RPC): what the service could at best reach
    seq          transformers `generate`, one request after another
    static       one left-padded transformers `generate` batch of all requests

The server and this process run torch with the same thread count (--threads: the server through
PRAXON_JOBS__TORCH_THREADS, which `praxon serve` applies, and OMP_NUM_THREADS). The model is registered directly in
a throwaway registry (a fresh PostgreSQL database and a `weed mini` S3, as the tests do).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/generation/service_throughput.py [--gemma /tmp/gemma/cache]
        [--new-tokens 32] [--threads 1] [--repeats 2] [--concurrency 1 8 32] [--rpcs stream unary]

Without --gemma the tiny random Llama of throughput.py is used (width 128, 4 layers); with it Gemma 3 270M
(services.generation.pretrained.hf_directory, dequantised float32). Each cell is the best of --repeats interleaved
runs (on a shared machine the slower runs measure the other jobs); the ratios are of the same run."""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "generation"))

import torch  # noqa: E402

from benchmarks.recommendation.serving import free_port, wait_port  # noqa: E402
from services.generation import corpus  # noqa: E402


def load(gemma: str | None):
    """(model, tokenizer, registry tensors, registry config)."""
    from services.common import hf

    if gemma:
        from services.generation import pretrained

        path = pretrained.hf_directory(gemma)
        tensors, config = hf.to_registry(hf.read_directory(path))
        model, tok = hf.load_model(tensors, config)
        return model, tok, tensors, config
    from throughput import model_and_tokenizer

    model, tok = model_and_tokenizer(None)
    tensors, config = hf.from_pretrained_objects(model, tok)
    return model, tok, tensors, config


async def grpc_run(stub, md, name: str, prompts: list[str], new_tokens: int, stream: bool):
    """All prompts at once through the service: (tokens/s, mean time to first token at the client)."""
    from praxon.common.v1 import common_pb2
    from praxon.generation.v1 import generation_pb2 as pb

    t0 = time.monotonic()

    async def one(prompt: str):
        req = pb.GenerateRequest(model=common_pb2.ModelRef(name=name), prompt=prompt,
                                 sampling=pb.SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
        if not stream:
            r = await stub.Generate(req, metadata=md, timeout=600)
            return len(r.tokens), time.monotonic() - t0
        n, first = 0, None
        async for msg in stub.GenerateStream(req, metadata=md, timeout=600):
            if msg.HasField("token"):
                n += 1
                if first is None:
                    first = time.monotonic() - t0
        return n, first
    res = await asyncio.gather(*(one(p) for p in prompts))
    dt = time.monotonic() - t0
    n = sum(r[0] for r in res)
    assert n == new_tokens * len(prompts), (n, new_tokens, len(prompts))
    return n / dt, sum(r[1] for r in res) / len(res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gemma", metavar="CACHE", help="serve Gemma 3 270M (its dequantised directory cached here)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads, in the server and in this process")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved runs per cell; the best is reported")
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--rpcs", nargs="+", default=["stream", "unary"], choices=["stream", "unary"])
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' sequential and static runs")
    ap.add_argument("--seq-requests", type=int, default=0,
                    help="time transformers' sequential generate on only the first K requests of a cell (its tok/s "
                         "does not depend on how many follow; its TTFT then covers K requests, not all). 0: all")
    ap.add_argument("--keep-log", action="store_true", help="print the server log's tail at the end")
    ap.add_argument("--baseline-root", metavar="DIR",
                    help="also serve from this source tree (e.g. `git archive <commit> | tar -x -C DIR`): its "
                         "GenerateStream is the column grpc-base, measured in the same run (before/after a change)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    import grpc

    from praxon.generation.v1 import generation_pb2_grpc
    from services.common import db
    from services.common.embedded import spawn
    from services.common.store import ArtifactStore
    from services.generation.engine import Engine
    from tests import harness
    from throughput import engine_run, hf_sequential, hf_static

    t_start = time.monotonic()
    model, tok, tensors, config = load(a.gemma)
    name = "gemma" if a.gemma else "tiny-llama"
    print(f"# {name} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters), torch "
          f"{torch.__version__} with {torch.get_num_threads()} thread(s) here and in the server, {os.cpu_count()} "
          f"CPUs, load average {os.getloadavg()[0]:.1f}; {a.new_tokens} new tokens per request, greedy, EOS ignored; "
          f"best of {a.repeats}", flush=True)
    engine = Engine(model, tok, max_running=64, max_queued=1024, name="in-process").start()
    tmp = Path(f"/tmp/praxon-gen-bench-{uuid.uuid4().hex[:6]}")
    tmp.mkdir(parents=True)
    url = harness.create_database()
    procs = []
    rows = []
    try:
        with harness.weed_server(tmp) as weed:
            settings = harness.make_settings(url, weed.endpoint, f"{harness.REDIS_URL}/{harness.claim_redis_db()}",
                                             bucket="bench")
            settings.extra_services = []
            settings.jobs.torch_threads = a.threads
            db.migrate(settings)
            ArtifactStore(settings).ensure_bucket()
            tenant_id, token = harness.token_for(settings, f"bench-{uuid.uuid4().hex[:6]}")
            from services.common import hf

            harness.register_model(settings, tenant_id, name, tensors, kind=hf.REGISTRY_KIND, config=config)
            tensors = None
            env = {**os.environ, **harness.settings_env(settings), "OMP_NUM_THREADS": str(a.threads),
                   "MKL_NUM_THREADS": str(a.threads), "PRAXON_METRICS_PORT": "0",
                   "PRAXON_GRPC__REQUESTS_PER_SECOND_PER_TOKEN": "0", "PRAXON_GRPC__DEFAULT_DEADLINE_SECONDS": "600",
                   "PRAXON_GENERATION__MAX_RUNNING": "64", "PRAXON_GENERATION__MAX_QUEUED": "1024",
                   "PRAXON_GENERATION__DEFAULT_MODEL": name}
            env.pop("PRAXON_EXTRA_SERVICES", None)
            runner = asyncio.Runner()
            stubs = {}
            for label, root in [("grpc", ROOT)] + ([("base", Path(a.baseline_root))] if a.baseline_root else []):
                port = free_port()
                log = tmp / f"serve-{label}.log"
                here = os.getcwd()
                os.chdir(root)  # `python -m` puts the working folder first on sys.path: that tree's services
                try:
                    proc = spawn([sys.executable, "-m", "services.cli.main", "--log-level", "WARNING", "serve",
                                  "generation", "--port", str(port)], log,
                                 env={**env, "PYTHONPATH": str(root), "PRAXON_GRPC__PORT": str(port)})
                finally:
                    os.chdir(here)
                procs.append(proc)
                wait_port(port, proc, log)
                print(f"# {label} server pid {proc.pid} (guard; the server is its child) from {root} on "
                      f"127.0.0.1:{port} (log {log})", flush=True)
                channel = runner.run(_channel(f"127.0.0.1:{port}"))
                stubs[label] = (channel, generation_pb2_grpc.GenerationServiceStub(channel))
            md = harness.auth(token)
            warm_text = corpus.retrieval_set(0, 1, 4)[0].prompt
            warm = [engine.encode(warm_text)]
            for _, stub in stubs.values():
                for _ in range(60):  # the first call loads the model from the registry
                    try:
                        runner.run(grpc_run(stub, md, name, [warm_text] * 2, 4, True))
                        break
                    except grpc.aio.AioRpcError as err:
                        if err.code() != grpc.StatusCode.UNAVAILABLE:
                            raise
                        time.sleep(1)
                runner.run(grpc_run(stub, md, name, [warm_text] * 2, 4, False))
            engine_run(engine, warm * 2, 4)
            if not a.no_hf:
                hf_sequential(model, tok, warm, 4), hf_static(model, tok, warm * 2, 4)
            kinds = [f"grpc-{r}" for r in a.rpcs] + (["grpc-base"] if a.baseline_root else []) + ["engine"] + \
                ([] if a.no_hf else ["seq", "static"])
            for c in a.concurrency:
                texts = [corpus.retrieval_set(i, 1, 4 + (i * 7) % 20)[0].prompt for i in range(c)]
                prompts = [engine.encode(t) for t in texts]
                runs: dict[str, list] = {k: [] for k in kinds}
                for _ in range(a.repeats):  # interleaved, so all of them see the same background load
                    for k in kinds:
                        if k == "grpc-base":
                            r = runner.run(grpc_run(stubs["base"][1], md, name, texts, a.new_tokens, True))
                        elif k.startswith("grpc-"):
                            r = runner.run(grpc_run(stubs["grpc"][1], md, name, texts, a.new_tokens,
                                                    k == "grpc-stream"))
                        elif k == "engine":
                            r = engine_run(engine, prompts, a.new_tokens)
                        elif k == "seq":
                            r = hf_sequential(model, tok, prompts[:a.seq_requests or None], a.new_tokens)
                        else:
                            r = hf_static(model, tok, prompts, a.new_tokens)
                        runs[k].append(r)
                best = {k: (max(x[0] for x in v), min(x[1] for x in v)) for k, v in runs.items()}
                rows.append((c, sum(len(p) for p in prompts) / c, best))
                print(f"# c={c}: " + "  ".join(f"{k} {'/'.join(f'{x[0]:.0f}' for x in v)}" for k, v in runs.items())
                      + f"  (tok/s of each repeat; load {os.getloadavg()[0]:.1f})", flush=True)
            for channel, _ in stubs.values():
                runner.run(channel.close())
            runner.close()
            for proc in procs:
                proc.terminate()
                proc.wait(30)
            if a.keep_log:
                for f in sorted(tmp.glob("serve-*.log")):
                    print(f, f.read_text()[-3000:])
    finally:
        engine.stop()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        harness.drop_database(url)

    print(f"\nmodel {name}, {a.new_tokens} new tokens, {a.threads} torch thread(s) in each process; tokens/s "
          f"(best of {a.repeats}) and mean time to first token (s)"
          + (f"; seq timed on the first {a.seq_requests} requests of each cell" if a.seq_requests else ""))
    head = f"{'conc':>4} {'prompt':>6} " + " ".join(f"{k:>11}" for k in kinds)
    ratios = [(g, b) for g in kinds if g.startswith("grpc-") for b in ("engine", "seq", "static") if b in kinds]
    ratios += [("grpc-stream", "grpc-base")] if "grpc-base" in kinds and "grpc-stream" in kinds else []
    head += " " + " ".join(f"{g[5:] + '/' + b.removeprefix('grpc-'):>14}" for g, b in ratios) + "   TTFT " + " ".join(kinds)
    print(head)
    for c, plen, best in rows:
        line = f"{c:>4} {plen:6.0f} " + " ".join(f"{best[k][0]:11.1f}" for k in kinds)
        line += " " + " ".join(f"{best[g][0] / best[b][0]:14.2f}" for g, b in ratios)
        line += "   " + " ".join(f"{best[k][1]:.3f}" for k in kinds)
        print(line)
    print(f"wall {time.monotonic() - t_start:.0f} s, load average {os.getloadavg()[0]:.1f}")


async def _channel(address: str):
    import grpc

    return grpc.aio.insecure_channel(address)


if __name__ == "__main__":
    main()
