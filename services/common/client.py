"""Client side of the CLI: where the platform is, the token, and a progress bar over WatchJob."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc

from praxon.common.v1 import common_pb2
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc

UP_FILE = "up.json"  # written by `praxon up` into its data dir: address and the demo token


@dataclass
class Target:
    address: str
    token: str

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address)

    @property
    def metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.token}")]


def resolve_target(address: str | None, token: str | None, data_dir: str) -> Target:
    up = Path(data_dir) / UP_FILE
    found = json.loads(up.read_text()) if up.exists() else {}
    address = address or os.environ.get("PRAXON_ADDRESS") or found.get("address") or "127.0.0.1:50051"
    token = token or os.environ.get("PRAXON_TOKEN") or found.get("token")
    if not token:
        raise SystemExit("no API token: pass --token, set PRAXON_TOKEN, or run `praxon up` here first")
    return Target(address, token)


def state_name(state: int) -> str:
    return common_pb2.JobState.Name(state).removeprefix("JOB_STATE_")


def watch(target: Target, job_id: str, out=None) -> common_pb2.Job:
    """Follow a job to its end with a progress bar; returns the final job."""
    out = out or sys.stdout
    stub = jobs_pb2_grpc.JobServiceStub(target.channel())
    for item in stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=target.metadata):
        e = item.event
        width = 30
        filled = int(round(e.progress * width))
        metrics = " ".join(f"{k}={v:.4g}" for k, v in sorted(e.metrics.items()))
        out.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {e.progress * 100:5.1f}% {state_name(e.state):9} "
                  f"{e.message[:50]:50} {metrics}")
        out.flush()
        if state_name(e.state) not in ("QUEUED", "RUNNING"):
            break
    out.write("\n")
    return stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=target.metadata).job
