"""jobs.torch_threads is what every process that runs models uses (issue 39): `praxon serve` (and so `praxon up`),
a predictor and each worker job process set torch's intra-op threads from it; the default is 1 (the measurement:
benchmarks/platform/torch_threads.py). Each case in a fresh interpreter, where torch starts with one thread per
core."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import harness

SCRIPT = r"""
import asyncio, json, sys
import torch
torch.set_num_threads(4)  # as if torch's default on a 4-core machine: the settings must change it
from services import catalog
settings = catalog.settings()
out = {"setting": settings.jobs.torch_threads}
if sys.argv[1] == "serve":
    from services.cli.serve import serve

    async def main():
        stop = asyncio.Event()
        await serve(settings, ["platform"], stop_event=stop, on_serving=lambda port: stop.set())
    settings.grpc.port = 0
    asyncio.run(main())
elif sys.argv[1] == "worker":
    from workers import runtime

    runtime.configure(settings)
    runtime.get_runtime()
out["threads"] = torch.get_num_threads()
print(json.dumps(out))
"""


@pytest.mark.parametrize("where", ["serve", "worker"])
@pytest.mark.parametrize("threads", [None, 2])
def test_servers_and_worker_job_processes_take_torch_threads_from_settings(settings, where, threads):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PRAXON_")}, **harness.settings_env(settings),
           "PYTHONPATH": str(harness.ROOT), "PRAXON_METRICS_PORT": "0"}
    env.pop("PRAXON_JOBS__TORCH_THREADS")
    if threads is not None:
        env["PRAXON_JOBS__TORCH_THREADS"] = str(threads)
    run = subprocess.run([sys.executable, "-c", SCRIPT, where], capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    want = 1 if threads is None else threads  # the default: one thread
    assert got == {"setting": want, "threads": want}, got
