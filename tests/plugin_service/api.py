"""The plugin's servicer: proto <-> the platform's job store and its own table."""
from __future__ import annotations

import grpc

from services.common.server import AppContext, current_tenant
from tests.plugin_service import echo_pb2 as pb
from tests.plugin_service import echo_pb2_grpc


class EchoServicer(echo_pb2_grpc.EchoServiceServicer):
    def __init__(self, app: AppContext):
        self.app = app

    async def StartEchoJob(self, request: pb.StartEchoJobRequest, context) -> pb.StartEchoJobResponse:
        tenant = current_tenant()
        # the job store validates n with the kind's params model: INVALID_ARGUMENT naming "n" before anything is written
        job = await self.app.db(self.app.jobs.submit, tenant, "echo.count", {"n": request.n})
        return pb.StartEchoJobResponse(job_id=str(job["id"]))

    async def ListCounts(self, request: pb.ListCountsRequest, context) -> pb.ListCountsResponse:
        tenant = current_tenant()

        def read():
            with self.app.pool.connection() as conn:
                return conn.execute("SELECT job_id, counted FROM echo_counts WHERE tenant_id = %s "
                                    "ORDER BY finished_at, job_id", (tenant,)).fetchall()
        rows = await self.app.db(read)
        return pb.ListCountsResponse(counts=[pb.Count(job_id=str(r["job_id"]), counted=r["counted"]) for r in rows])


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    echo_pb2_grpc.add_EchoServiceServicer_to_server(EchoServicer(app), server)
    return [pb.DESCRIPTOR.services_by_name["EchoService"].full_name]
