"""gRPC server cost in instructions: a trivial unary RPC on a bare grpc.aio server vs the praxon server (every
interceptor, a real token), counted by valgrind's callgrind. Prints instructions per call and their ratios.

Why instructions: on a shared 2-core machine the wall-clock ratio of grpc_overhead.py moves by more than the
difference it measures (single rounds x0.6-1.2). Callgrind counts the instructions the server process executes
in user space, whatever else the machine is doing (a few percent of run-to-run spread remains: how many events
the event loop finds per wake-up depends on timing). The kernel's share of a call (socket reads and writes,
epoll) is not counted; it is about the same for both servers. So this measures work, not time, and the two can
disagree: on 2026-12-04 the instruction ratio bare / praxon-all was x0.88 while the servers' user CPU time per
call, read from /proc in the same setting without valgrind, gave x0.78 (the praxon process's larger heap makes
its instructions slower on average) and user + system time x0.87 (benchmarks/platform/RESULTS.md). Use it to
compare versions of the server, where a change shows to within a fraction of a percent.

Each server runs alone in its own process under `valgrind --tool=callgrind --instr-atstart=no`; the client
(this process, not under valgrind) warms it up, switches instrumentation on with callgrind_control, makes
--calls calls at --concurrency, and switches it off. Every server gets the same requests, token included.
Servers:
  bare            grpc.aio.server() with the echo method only
  praxon          services.common.server.create_server with the echo method (health and reflection as always)
  praxon-all      the same, also hosting every service in the catalog (as `praxon serve` does)
  praxon-all-registered   praxon-all with its methods also registered with the core (grpc's default before
                  generic_methods_only; shows what that change saves)

    .venv/bin/python benchmarks/platform/grpc_instructions.py [--calls 2000] [--rounds 2] [--servers ...] [--cpu]

--cpu: the same servers without valgrind, measuring the server process's CPU time per call instead (user + system,
every thread, read from /proc/<pid>/task/*/schedstat): the throughput ratio of a CPU-bound server. The server runs
alone on the last core and the client on the others (taskset / sched_setaffinity), so that neither disturbs the
other's caches: pinned, the ratio repeated to about 0.02 between runs on one machine on 2026-12-04 (x0.82-0.85, the
code of then), where unpinned it moved from x0.76 to x0.92; on a noisier machine later that day, to about 0.06
(benchmarks/platform/RESULTS.md). Run the versions you compare alternately, in one session.

Needs valgrind (and PostgreSQL for the token). A server's start-up under valgrind takes 5-30 s.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpc_overhead import PING, echo_registrar  # noqa: E402 - the same echo method as the wall-clock benchmark

from tests import harness  # noqa: E402

SERVERS = ("bare", "praxon", "praxon-all", "praxon-all-registered")


# ------------------------------------------------------------------ server side (runs under valgrind)
async def serve(kind: str, database_url: str, port_file: str) -> None:
    if kind == "bare":
        server = grpc.aio.server()
        echo_registrar(server, None)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
    else:
        import services.common.server as praxon_server
        from services.common.server import dispatcher
        from services import catalog
        from services.cli.serve import registrars

        if kind == "praxon-all-registered":  # grpc's default registration, as before generic_methods_only
            dispatcher.generic_methods_only = lambda server: server
        settings = harness.make_settings(database_url, "127.0.0.1:1", f"{harness.REDIS_URL}/0", "unused")
        app = praxon_server.build_app_context(settings)
        hosted = [echo_registrar] + (registrars(catalog.names()) if kind.startswith("praxon-all") else [])
        server, port = await praxon_server.create_server(app, hosted, port=0)
    gc.freeze()  # as `praxon serve` does after start-up (both servers, so that neither pays for collecting it)
    Path(port_file + ".tmp").write_text(str(port))
    os.replace(port_file + ".tmp", port_file)  # the client waits for this file
    await server.wait_for_termination()


# ------------------------------------------------------------------ client side
async def _calls(port: int, metadata, calls: int, concurrency: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        ping = channel.unary_unary(PING)

        async def worker(n: int) -> None:
            for _ in range(n):
                await ping(b"x" * 64, metadata=metadata)
        await asyncio.gather(*[worker(calls // concurrency) for _ in range(concurrency)])


def _cpu_ns(pid: int) -> int:
    """CPU time the process's threads have run, in ns (the first field of each thread's schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            pass
    return total


def cost_per_call(kind: str, database_url: str, token: str, calls: int, concurrency: int, workdir: Path,
                  cpu: bool = False) -> float:
    """Instructions per call (under callgrind), or with `cpu` the server's CPU µs per call (no valgrind)."""
    port_file, out = workdir / f"port.{kind}", workdir / f"callgrind.{kind}"
    for f in (port_file, out):
        f.unlink(missing_ok=True)
    under = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    if cpu:  # the server alone on the last core, the client on the others: neither slows the other's caches
        under = ["taskset", "-c", str(os.cpu_count() - 1)] if (os.cpu_count() or 1) > 1 else []
    proc = subprocess.Popen(
        [*under, sys.executable, __file__, "--serve", kind, database_url, str(port_file)],
        env=dict(os.environ, PYTHONHASHSEED="0"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind} server did not start: {proc.stderr.read()[-2000:]}")
            time.sleep(0.2)
        port, metadata = int(port_file.read_text()), harness.auth(token)
        asyncio.run(_calls(port, metadata, 200, concurrency))  # warm up: token cache, handler cache, code paths
        if cpu:
            before = _cpu_ns(proc.pid)
            asyncio.run(_calls(port, metadata, calls, concurrency))
            return (_cpu_ns(proc.pid) - before) / 1e3 / (calls // concurrency * concurrency)
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
        asyncio.run(_calls(port, metadata, calls, concurrency))
        subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    total = re.search(r"^totals:\s+(\d+)", out.read_text(), re.M)
    if total is None:
        raise RuntimeError(f"no totals in {out}")
    return int(total.group(1)) / (calls // concurrency * concurrency)


def main(args) -> None:
    from services.common import db
    from services.common.settings import Settings

    if args.cpu and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, set(range(os.cpu_count() - 1)))  # (the servers get the last core)
    if not args.cpu and shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian package valgrind)")
    unit = "CPU µs" if args.cpu else "instructions"
    database_url = harness.create_database()
    try:
        db.migrate(Settings(database_url=database_url))
        settings = harness.make_settings(database_url, "127.0.0.1:1", f"{harness.REDIS_URL}/0", "unused")
        _, token = harness.token_for(settings, "bench")
        counts: dict[str, list[float]] = {kind: [] for kind in args.servers}
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):  # interleaved, as in grpc_overhead.py
                for kind in args.servers:
                    counts[kind].append(cost_per_call(kind, database_url, token, args.calls, args.concurrency,
                                                      Path(tmp), args.cpu))
                    print(f"round {r + 1}: {kind:22} {counts[kind][-1]:10.1f} {unit} per call", flush=True)
    finally:
        harness.drop_database(database_url)
    what = "the server process's CPU µs per call (user + system, all threads)" if args.cpu else \
        "instructions per call in the server process (user space)"
    print(f"\ntrivial unary RPC, {args.calls} calls at concurrency {args.concurrency}, median of {args.rounds} "
          f"round(s); {what}")
    bare = statistics.median(counts["bare"]) if "bare" in counts else None
    digits = 1 if args.cpu else 0
    for kind, values in counts.items():
        median = statistics.median(values)
        ratio = f"   bare / this x{bare / median:.2f}" if bare and kind != "bare" else ""
        if bare and kind != "bare" and args.cpu:  # rounds alternate servers: the median of the paired ratios too
            ratio += f" (median of the rounds' ratios x{statistics.median(b / v for b, v in zip(counts['bare'], values, strict=True)):.2f})"
        print(f"{kind:22} {median:10.{digits}f}  (rounds: {', '.join(f'{v:.{digits}f}' for v in values)}){ratio}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        asyncio.run(serve(*sys.argv[2:5]))
    else:
        ap = argparse.ArgumentParser()
        ap.add_argument("--calls", type=int, default=2000)
        ap.add_argument("--concurrency", type=int, default=16)
        ap.add_argument("--rounds", type=int, default=2)
        ap.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS))
        ap.add_argument("--cpu", action="store_true", help="measure the server's CPU time per call instead "
                        "(no valgrind; in time, so it moves with the machine's load)")
        main(ap.parse_args())
