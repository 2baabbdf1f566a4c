"""An external client no test here wrote: `buf curl` discovers the API over reflection and calls it."""
from __future__ import annotations

import json
import subprocess

import grpc

from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from tests.harness import ROOT, auth

BUF = ROOT / ".tools" / "node_modules" / ".bin" / "buf"


def buf_curl(address: str, method: str, body: dict, headers: list[str] = ()) -> subprocess.CompletedProcess:
    args = [str(BUF), "curl", "--protocol", "grpc", "--http2-prior-knowledge", "-d", json.dumps(body)]
    for h in headers:
        args += ["-H", h]
    return subprocess.run([*args, f"http://{address}/{method}"], capture_output=True, text=True, timeout=60)


def test_buf_curl_calls_get_job_and_health_over_reflection(platform, tenants):
    token = tenants["a"][1]
    job = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(platform.address)).StartSelfTestJob(
        jobs_pb2.StartSelfTestJobRequest(steps=1), metadata=auth(token)).job
    out = buf_curl(platform.address, "praxon.jobs.v1.JobService/GetJob", {"jobId": job.id},
                   [f"authorization: Bearer {token}"])
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)["job"]
    assert got["id"] == job.id and got["kind"] == "platform.selftest"

    health = buf_curl(platform.address, "grpc.health.v1.Health/Check", {"service": "praxon.jobs.v1.JobService"})
    assert health.returncode == 0, health.stderr
    assert json.loads(health.stdout)["status"] == "SERVING"

    denied = buf_curl(platform.address, "praxon.jobs.v1.JobService/GetJob", {"jobId": job.id})
    assert denied.returncode != 0 and "unauthenticated" in denied.stderr.lower()
