"""The console's side of the public gRPC API: one channel to the platform shared by every signed-in user (each call
carries that user's token), the stubs the pages use, and what a failed call means for a page."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from google.protobuf import json_format

from praxon.artifacts.v1 import artifacts_pb2_grpc
from praxon.design.v1 import crystals_pb2_grpc, design_pb2_grpc
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.models.v1 import models_pb2_grpc
from praxon.unlearning.v1 import unlearning_pb2_grpc
from services.common.client import retrying_channel, state_name, tls_credentials_from_env

CALL_TIMEOUT_S = 30.0  # one page's call; a page never waits on the platform longer than this

# A call that names another tenant's object, or no object at all, is a page that does not exist (404): the console
# never says whether an id exists elsewhere.
NOT_FOUND_CODES = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED)


class Platform:
    """Stubs over retrying channels (services.common.client.retrying_channel: TLS from PRAXON_TLS_* when set), and
    an asyncio channel for the streams the pages follow live (WatchJob). One address serves everything (`praxon
    serve`, `praxon up`); in a cluster each service has its own, given by service_addresses (service name ->
    host:port: "unlearning", "design"; "platform" is `address`)."""

    def __init__(self, address: str, service_addresses: dict[str, str] | None = None):
        self.address = address
        channels: dict[str, grpc.Channel] = {}

        def channel(service: str) -> grpc.Channel:
            target = (service_addresses or {}).get(service) or address
            if target not in channels:
                channels[target] = retrying_channel(target, budget_s=10.0)
            return channels[target]
        self.channels = channels
        self.jobs = jobs_pb2_grpc.JobServiceStub(channel("platform"))
        self.models = models_pb2_grpc.ModelRegistryServiceStub(channel("platform"))
        self.artifacts = artifacts_pb2_grpc.ArtifactServiceStub(channel("platform"))
        self.design = design_pb2_grpc.DesignServiceStub(channel("design"))
        self.crystals = crystals_pb2_grpc.CrystalServiceStub(channel("design"))
        self.unlearning = unlearning_pb2_grpc.UnlearningServiceStub(channel("unlearning"))
        self._aio: grpc.aio.Channel | None = None

    def aio_jobs(self) -> jobs_pb2_grpc.JobServiceStub:
        """A JobService stub on an asyncio channel, made in the running event loop on first use."""
        if self._aio is None:
            credentials = tls_credentials_from_env()
            self._aio = grpc.aio.secure_channel(self.address, credentials) if credentials else \
                grpc.aio.insecure_channel(self.address)
        return jobs_pb2_grpc.JobServiceStub(self._aio)

    def close(self) -> None:
        for c in self.channels.values():
            c.close()


def metadata(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def to_dict(message) -> dict:
    """A protobuf message (a Struct included) as plain JSON-able data, for templates and JSON answers."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def event_dict(e) -> dict:
    """One JobEvent as the page's script reads it."""
    return {"job_id": e.job_id, "sequence": e.sequence, "state": state_name(e.state), "progress": e.progress,
            "message": e.message, "metrics": dict(e.metrics),
            "time": e.time.ToDatetime().isoformat(timespec="seconds") + "Z" if e.HasField("time") else ""}


def finished_events(platform: Platform, token: str, job_id: str) -> list[dict]:
    """Every event of a job that has ended: WatchJob from the start closes after the terminal event."""
    stream = platform.jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=metadata(token),
                                    timeout=CALL_TIMEOUT_S)
    return [event_dict(item.event) for item in stream]


async def merged_watch(platform: Platform, token: str, positions: dict[str, int]) -> AsyncIterator[dict]:
    """The events of several jobs as they happen, merged into one stream (one page follows every running job it
    shows over one connection: browsers open at most six per host). positions: job id -> the last sequence the page
    has. Ends when every job's stream has ended (each ends after its job's terminal event); a job the token cannot
    see yields {"job_id", "error"} and is dropped."""
    queue: asyncio.Queue = asyncio.Queue()
    stub = platform.aio_jobs()

    async def follow(job_id: str, after: int) -> None:
        try:
            call = stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id, after_sequence=after),
                                 metadata=metadata(token))
            async for item in call:
                await queue.put(event_dict(item.event))
        except grpc.aio.AioRpcError as err:
            await queue.put({"job_id": job_id, "error": err.code().name})
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(follow(j, after)) for j, after in positions.items()]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
