"""gRPC overhead: a trivial unary RPC through every praxon dispatcher (request id, metrics, errors, auth with a
real token, limits) vs the same handler on a bare grpc.aio server. Prints p50/p99 latency and calls/s.

Both servers run in this process; the client runs in a separate process (so its own cost does not count against
the servers, and a 2-core machine gives each side a core). Rounds alternate between the servers; the ratio is the
median of each round's praxon/bare ratio, which a shared machine's changing load moves much less than a ratio of
medians. The servers' CPU time per call (this process's CPU seconds over a round, divided by its calls) is printed
too: on a CPU-bound server, throughput is one over it, and CPU time moves much less with the machine's other load
than wall time does, so its ratio is the steadier estimate of the throughput cost.

    .venv/bin/python benchmarks/platform/grpc_overhead.py [--calls 2000] [--concurrency 16] [--rounds 5] [--host-all]

For the same comparison in instructions (repeatable on a shared machine), see grpc_instructions.py.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests import harness

PING = "/bench.Echo/Ping"


def echo_registrar(server, app):
    handler = grpc.unary_unary_rpc_method_handler(_echo, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {"Ping": handler}),))
    return []


async def _echo(request: bytes, context) -> bytes:
    return request


async def measure(address: str, metadata, calls: int, concurrency: int) -> dict:
    async with grpc.aio.insecure_channel(address) as ch:
        ping = ch.unary_unary(PING)
        for _ in range(50):  # warm up (and fill the token cache)
            await ping(b"x", metadata=metadata)
        lat = []
        t0 = time.perf_counter()
        for _ in range(calls):
            s = time.perf_counter()
            await ping(b"x" * 64, metadata=metadata)
            lat.append(time.perf_counter() - s)
        serial = time.perf_counter() - t0

        async def worker(n):
            for _ in range(n):
                await ping(b"x" * 64, metadata=metadata)
        t0 = time.perf_counter()
        await asyncio.gather(*[worker(calls // concurrency) for _ in range(concurrency)])
        conc = time.perf_counter() - t0
    lat.sort()
    return {"p50_ms": 1e3 * statistics.median(lat), "p99_ms": 1e3 * lat[int(0.99 * len(lat)) - 1],
            "serial_rps": calls / serial, "concurrent_rps": (calls // concurrency) * concurrency / conc}


def measure_in_client(address: str, metadata, calls: int, concurrency: int) -> dict:
    return asyncio.run(measure(address, metadata, calls, concurrency))


class _Context:
    """What a servicer context offers the dispatcher, without a network: for timing the dispatcher alone."""

    def __init__(self, metadata):
        self.metadata = tuple(metadata)

    def invocation_metadata(self):
        return self.metadata

    def set_trailing_metadata(self, metadata) -> None:
        pass

    def time_remaining(self):
        return None

    def code(self):
        return None


async def dispatcher_cost_us(app, token: str, calls: int = 20000) -> tuple[float, float]:
    """(µs per call through the praxon dispatcher, µs per direct call) of the echo handler, in this process
    with no network: the dispatcher's own cost, which a shared machine's load barely moves."""
    from prometheus_client import CollectorRegistry

    from services.common.server import Authenticator, Dispatcher, RequestLimits, metrics_of

    g = app.settings.grpc
    dispatcher = Dispatcher(Authenticator(app.pool), RequestLimits(g.max_message_bytes, g.default_deadline_seconds),
                            metrics_of(CollectorRegistry()))
    handler = grpc.unary_unary_rpc_method_handler(_echo, request_deserializer=None, response_serializer=None)
    wrapped = dispatcher.wrap(PING, handler).unary_unary
    context = _Context(harness.auth(token))
    out = []
    for fn in (wrapped, _echo):
        await fn(b"x", context)  # (fills the token cache)
        t0 = time.perf_counter()
        for _ in range(calls):
            await fn(b"x" * 64, context)
        out.append(1e6 * (time.perf_counter() - t0) / calls)
    return out[0], out[1]


async def main_async(args) -> None:
    from services.common.server import build_app_context, create_server, shutdown

    db_url = harness.create_database()
    from services.common import db
    from services.common.settings import Settings
    db.migrate(Settings(database_url=db_url))
    settings = harness.make_settings(db_url, "127.0.0.1:1", f"{harness.REDIS_URL}/0", "unused")
    try:
        _, token = harness.token_for(settings, "bench")
        app = build_app_context(settings)
        hosted = [echo_registrar]
        if args.host_all:  # every service in the catalog as well, as `praxon serve` hosts them
            from services import catalog
            from services.cli.serve import registrars
            hosted += registrars(catalog.names())
        praxon_server, praxon_port = await create_server(app, hosted, port=0)
        bare = grpc.aio.server()
        echo_registrar(bare, None)
        bare_port = bare.add_insecure_port("127.0.0.1:0")
        await bare.start()
        runs: dict[str, list[dict]] = {}
        calls_per_round = 50 + args.calls + (args.calls // args.concurrency) * args.concurrency
        loop = asyncio.get_running_loop()
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as client:
            for _ in range(args.rounds):  # interleaved, so a shared machine's load changes hit both alike
                for name, port, md in [("bare grpc.aio", bare_port, None),
                                       ("praxon (dispatcher)", praxon_port, harness.auth(token))]:
                    cpu0 = time.process_time()  # both servers live in this process and only one is called at a time
                    r = await loop.run_in_executor(
                        client, measure_in_client, f"127.0.0.1:{port}", md, args.calls, args.concurrency)
                    r["server_cpu_us"] = 1e6 * (time.process_time() - cpu0) / calls_per_round
                    runs.setdefault(name, []).append(r)
        cost = min([await dispatcher_cost_us(app, token) for _ in range(3)])
        rows = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
        await shutdown(praxon_server, 0)
        await bare.stop(0)
        app.pool.close()
    finally:
        harness.drop_database(db_url)
    print(f"\ntrivial unary RPC, {args.calls} calls; concurrency {args.concurrency} for throughput; "
          f"median of {args.rounds} interleaved rounds")
    print(f"{'server':28} {'p50 ms':>8} {'p99 ms':>8} {'calls/s (1)':>12} {'calls/s (c)':>12} {'server CPU µs/call':>19}")
    for name, r in rows.items():
        print(f"{name:28} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['serial_rps']:12.0f} {r['concurrent_rps']:12.0f} "
              f"{r['server_cpu_us']:19.1f}")
    paired = [{k: p[k] / b[k] for k in p} for p, b in zip(runs["praxon (dispatcher)"],
                                                                      runs["bare grpc.aio"], strict=True)]
    ratio = {k: statistics.median(r[k] for r in paired) for k in paired[0]}
    print(f"ratio praxon / bare (median of the rounds' ratios): p50 x{ratio['p50_ms']:.2f}, "
          f"p99 x{ratio['p99_ms']:.2f}, throughput x{ratio['concurrent_rps']:.2f} "
          f"(rounds: {', '.join(format(r['concurrent_rps'], '.2f') for r in paired)})")
    cpu = [1 / p["server_cpu_us"] for p in paired]  # bare CPU per call / praxon CPU per call
    print(f"server CPU per call, bare / praxon (the throughput ratio of a CPU-bound server): x{statistics.median(cpu):.2f} "
          f"(rounds: {', '.join(format(c, '.2f') for c in cpu)})")
    bare_call_us = 1e6 / rows["bare grpc.aio"]["concurrent_rps"]
    print(f"the dispatcher alone, in process (best of 3): {cost[0] - cost[1]:.1f} µs per call; a bare grpc.aio call "
          f"here costs {bare_call_us:.0f} µs (1 / its calls/s at concurrency {args.concurrency}), so its throughput "
          f"ceiling with the dispatcher is x{bare_call_us / (bare_call_us + cost[0] - cost[1]):.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--host-all", action="store_true", help="the praxon server also hosts every service")
    asyncio.run(main_async(ap.parse_args()))
