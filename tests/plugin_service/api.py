"""The throwaway service's one RPC, registered with a generic handler (a real service uses generated stubs)."""
from __future__ import annotations

import grpc
from google.protobuf import json_format, struct_pb2

from services.common.server import AppContext, current_tenant

SERVICE = "praxon.echo.v1.EchoService"


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    async def start(request: struct_pb2.Struct, context) -> struct_pb2.Struct:
        params = json_format.MessageToDict(request)
        tenant = current_tenant()
        job = await app.db(lambda: app.jobs.submit(tenant, "echo.count", params))
        return json_format.ParseDict({"job_id": str(job["id"])}, struct_pb2.Struct())

    handler = grpc.method_handlers_generic_handler(SERVICE, {"StartEchoJob": grpc.unary_unary_rpc_method_handler(
        start, request_deserializer=struct_pb2.Struct.FromString,
        response_serializer=struct_pb2.Struct.SerializeToString)})
    server.add_generic_rpc_handlers((handler,))
    return [SERVICE]
