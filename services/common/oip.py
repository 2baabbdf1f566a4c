"""Open Inference Protocol v2 answers that every client decodes. kserve fills a gRPC response's typed `contents`
unless told otherwise, and tritonclient reads only `raw_output_contents`: a gRPC answer here is always raw (kserve's
own InferenceGRPCClient reads raw too); over REST the caller's binary_data_output choice stands. The tensor specs a
predictor declares are both its model metadata (inputs/outputs with datatypes and shapes, -1 = variable) and the
shapes its outputs are built with.

Serving (`praxon predictor`): predictor_server() is kserve's ModelServer bound to one host, and, with a
TenantTokens, answering only requests that carry an API token of the predictor's tenant (health, readiness and
metrics stay open for probes)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import grpc

from kserve.protocol.infer_type import InferRequest, InferResponse


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # -1: variable

    def as_metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def response(payload: InferRequest, **kwargs) -> InferResponse:
    """An InferResponse whose outputs go as raw bytes over gRPC (and as the caller asked over REST)."""
    raw = bool(getattr(payload, "from_grpc", False)) or bool(payload.use_binary_outputs)
    return InferResponse(use_binary_outputs=raw, **kwargs)


# ---------------------------------------------------------------------------------------------- serving
PUBLIC_HTTP = re.compile(r"^/(|metrics|v2/health/(live|ready)|v2/models/[^/]+(/versions/[^/]+)?/ready)$")
PUBLIC_GRPC = frozenset(f"/inference.GRPCInferenceService/{m}" for m in ("ServerLive", "ServerReady", "ModelReady"))


def in_cluster() -> bool:
    """Inside a Kubernetes pod (the kubelet sets KUBERNETES_SERVICE_HOST in every container)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


class TenantTokens:
    """`Authorization: Bearer <praxon API token>` of one tenant, looked up and cached as the platform's
    AuthInterceptor does (services.common.server.TokenLookups)."""

    def __init__(self, pool, tenant_id: str, cache_seconds: float = 30.0, negative_cache_seconds: float = 2.0):
        from services.common.server import TokenLookups

        self.tenant_id = str(tenant_id)
        self.lookups = TokenLookups(pool, cache_seconds, negative_cache_seconds)

    async def check(self, header: str) -> str | None:
        """None when the header carries a live token of this tenant, else why not (one line for the caller)."""
        scheme, _, token = (header or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return "missing bearer token (Authorization: Bearer <praxon API token>)"
        found = await self.lookups.identity(token)
        # another tenant's token is refused like an unknown one: this predictor serves only its own tenant
        if found is not None and str(found["tenant_id"]) == self.tenant_id:
            return None
        return "invalid or revoked API token for this predictor's tenant"


class BearerAuthMiddleware:
    """ASGI middleware: every HTTP path but the health, readiness and metrics ones (PUBLIC_HTTP, which kubelet
    probes and Prometheus call without a token) needs the tenant's token, else 401. Plain ASGI, not Starlette's
    BaseHTTPMiddleware, so streamed answers (the generation predictor's server-sent events) pass through as they
    are."""

    def __init__(self, app, tokens: TenantTokens):
        self.app, self.tokens = app, tokens

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or PUBLIC_HTTP.match(scope["path"]):
            return await self.app(scope, receive, send)
        header = dict(scope.get("headers") or ()).get(b"authorization", b"").decode("latin-1")
        error = await self.tokens.check(header)
        if error is None:
            return await self.app(scope, receive, send)
        body = json.dumps({"error": error}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):
    """The same rule over gRPC: every method but ServerLive, ServerReady and ModelReady needs the tenant's token in
    the `authorization` metadata, else UNAUTHENTICATED (every OIP v2 method is unary-unary)."""

    def __init__(self, tokens: TenantTokens):
        self.tokens = tokens

    async def intercept_service(self, continuation, details):
        if details.method in PUBLIC_GRPC:
            return await continuation(details)
        header = dict(details.invocation_metadata or ()).get("authorization", "")
        error = await self.tokens.check(header if isinstance(header, str) else "")
        if error is None:
            return await continuation(details)

        async def refuse(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, error)
        return grpc.unary_unary_rpc_method_handler(refuse)


def predictor_server(host: str, http_port: int, grpc_port: int, tokens: TenantTokens | None = None):
    """kserve's ModelServer listening on `host` only (REST and gRPC), with bearer auth when `tokens` is given.

    Why a subclass: kserve 0.21 hard-codes the listening address (host="0.0.0.0" in RESTServer's uvicorn.Config,
    "[::]" in GRPCServer.start) and takes no interceptors for its gRPC server. The subclass keeps everything else
    of ModelServer.start() (model registration, the REST app, signals, the event loop) and changes only what
    _serve() gets: the REST server's uvicorn Config host (read when uvicorn binds, after start() built it), and a
    gRPC server of its own (kserve's servicer and interceptors, bound to `host`, plus the auth interceptor) in
    place of kserve's, which is disabled (enable_grpc=False). ModelServer.stop() stops it through _grpc_server as
    it would kserve's. If a kserve upgrade moves these attributes, start fails loudly rather than binding every
    interface (and tests/platform/test_predictor_access.py checks the listening addresses)."""
    from concurrent import futures

    from kserve import ModelServer
    from kserve.model_server import app, args
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
    from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor, LoggingInterceptor
    from kserve.protocol.grpc.server import GRPCServer
    from kserve.protocol.grpc.servicer import InferenceServicer
    from kserve.protocol.rest.server import RESTServer

    class HostGRPCServer(GRPCServer):
        async def start(self, max_workers):
            interceptors = [LoggingInterceptor(), ExceptionToStatusInterceptor()]
            if tokens is not None:
                interceptors.insert(0, BearerAuthInterceptor(tokens))  # before anything reads the request
            self._server = grpc.aio.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                                           interceptors=interceptors, options=[
                ("grpc.max_send_message_length", self._kwargs.get("grpc_max_send_message_length")),
                ("grpc.max_receive_message_length", self._kwargs.get("grpc_max_receive_message_length"))])
            grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
                InferenceServicer(self._data_plane, self._model_repository_extension), self._server)
            address = f"[{host}]:{self._port}" if ":" in host else f"{host}:{self._port}"
            if self._server.add_insecure_port(address) == 0:
                raise RuntimeError(f"cannot listen on {address}")
            await self._server.start()
            await self._server.wait_for_termination()

    class PredictorServer(ModelServer):
        async def _serve(self):
            if not isinstance(self._rest_server, RESTServer) or self._grpc_server is not None:
                raise RuntimeError("kserve's ModelServer changed: cannot bind the predictor to one host")
            self._rest_server.config.host = host
            self._grpc_server = HostGRPCServer(grpc_port, self.dataplane, self.model_repository_extension,
                                               kwargs=vars(args), grace_period=self.grace_period)
            self.servers.append(self._grpc_server.start(self.max_threads))
            await super()._serve()

    if tokens is not None:
        app.add_middleware(BearerAuthMiddleware, tokens=tokens)
    return PredictorServer(http_port=http_port, grpc_port=grpc_port, workers=1, enable_grpc=False)
