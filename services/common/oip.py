"""Open Inference Protocol v2 answers that every client decodes. kserve fills a gRPC response's typed `contents`
unless told otherwise, and tritonclient reads only `raw_output_contents`: a gRPC answer here is always raw (kserve's
own InferenceGRPCClient reads raw too); over REST the caller's binary_data_output choice stands. The tensor specs a
predictor declares are both its model metadata (inputs/outputs with datatypes and shapes, -1 = variable) and the
shapes its outputs are built with.

Serving (`praxon predictor`): predictor_server() is kserve's ModelServer bound to one host, and, with a
TenantTokens, answering only requests that carry an API token of the predictor's tenant (health, readiness and
metrics stay open for probes).

Errors, one rule for every predictor: a request the server cannot read (a body that is not JSON or not an OIP
request, a binary section that does not fit, a BYTES element that is not UTF-8 over REST, raw contents that do
not fit the datatype and shape) is the caller's fault: HTTP 400 / gRPC INVALID_ARGUMENT with a message naming the
input, never a 500 / INTERNAL. The project's own errors raised by an engine inside a predictor get the platform's
gRPC codes and rich details (services.common.server.to_status) and over HTTP the status google.rpc.Code maps
that code to (400, 404, 409, 429 and 503 with Retry-After, ...)."""
from __future__ import annotations

import json
import math
import os
import re
import uuid
from dataclasses import dataclass

import grpc
import numpy as np
from kserve import Model
from kserve.errors import InvalidInput
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor
from kserve.protocol.infer_type import InferRequest, InferResponse
from kserve.utils.numpy_codec import to_np_dtype

from services.common.errors import InvalidArgument, PraxonError, ResourceExhausted, Unavailable


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # -1: variable

    def as_metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


class DeclaredModel(Model):
    """A kserve Model whose model metadata is the tensor specs it declares in INPUTS and OUTPUTS."""

    INPUTS: tuple[TensorSpec, ...] = ()
    OUTPUTS: tuple[TensorSpec, ...] = ()

    def get_input_types(self) -> list[dict]:
        return [t.as_metadata() for t in self.INPUTS]

    def get_output_types(self) -> list[dict]:
        return [t.as_metadata() for t in self.OUTPUTS]


def response(payload: InferRequest, **kwargs) -> InferResponse:
    """An InferResponse whose outputs go as raw bytes over gRPC (and as the caller asked over REST)."""
    raw = bool(getattr(payload, "from_grpc", False)) or bool(payload.use_binary_outputs)
    return InferResponse(use_binary_outputs=raw, **kwargs)


def array(inp, name: str) -> np.ndarray:
    """An input's values as numpy, or InvalidInput naming the input: kserve decodes raw contents lazily, and data
    that does not fit the declared datatype or shape fails inside as_numpy() with numpy's or struct's errors."""
    try:
        return inp.as_numpy()
    except InvalidInput:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the decoder raised, the caller's data is at fault
        raise InvalidInput(f"input {name!r} ({inp.datatype} {list(inp.shape)}) cannot be read: {exc}") from None


# ---------------------------------------------------------------------------------------------- errors
# google.rpc.Code's HTTP mapping (code.proto), as gRPC-HTTP gateways use it
HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.FAILED_PRECONDITION: 400,
               grpc.StatusCode.OUT_OF_RANGE: 400, grpc.StatusCode.UNAUTHENTICATED: 401,
               grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.ALREADY_EXISTS: 409, grpc.StatusCode.ABORTED: 409,
               grpc.StatusCode.RESOURCE_EXHAUSTED: 429, grpc.StatusCode.CANCELLED: 499,
               grpc.StatusCode.UNIMPLEMENTED: 501, grpc.StatusCode.UNAVAILABLE: 503,
               grpc.StatusCode.DEADLINE_EXCEEDED: 504}


def grpc_status(exc: PraxonError) -> grpc.Status:
    """The platform's answer to a project error: code, message and rich details (ErrorInfo, BadRequest,
    RetryInfo), from the one mapping in services.common.server."""
    from services.common.server import to_status

    return to_status(exc, uuid.uuid4().hex)


def http_error(exc: PraxonError) -> tuple[int, dict, dict[str, str]]:
    """(status, JSON body, headers) for a project error over HTTP. The body keeps OIP's {"error": message}
    (tritonclient and kserve's clients show that field) with the reason and any field violations next to it."""
    status = HTTP_STATUS.get(grpc_status(exc).code, 500)
    body: dict = {"error": exc.message, "reason": exc.reason}
    if isinstance(exc, InvalidArgument):
        body["violations"] = [{"field": v.field, "description": v.description} for v in exc.violations]
    headers = {}
    if isinstance(exc, (ResourceExhausted, Unavailable)):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))  # whole seconds (RFC 9110)
    return status, body, headers


def install_error_handlers(app) -> None:
    """On a predictor's FastAPI app: project errors -> http_error(); a body FastAPI cannot validate as an OIP
    request -> 400 in OIP's error shape (FastAPI's default is 422 with its own shape)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    async def praxon_error(request, exc: PraxonError):
        status, body, headers = http_error(exc)
        return JSONResponse(body, status_code=status, headers=headers)

    async def invalid_body(request, exc: RequestValidationError):
        # the infer body is Union[InferenceRequest, bytes]: report the OIP branch's problems, not the bytes one's
        errors = [e for e in exc.errors() if "bytes" not in e.get("loc", ())] or list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        where = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:] if p != 'InferenceRequest') or 'body'}: "
                          f"{e.get('msg', '')}" for e in errors[:3])
        return JSONResponse({"error": f"not an Open Inference Protocol v2 request: {where}"}, status_code=400)

    app.add_exception_handler(PraxonError, praxon_error)
    app.add_exception_handler(RequestValidationError, invalid_body)


class StatusInterceptor(ExceptionToStatusInterceptor):
    """kserve's exception-to-status interceptor, plus the project's errors with the platform's codes and details
    (kserve's would make them INTERNAL)."""

    async def handle_exception(self, ex, request_or_iterator, context, method_name):
        if isinstance(ex, PraxonError):
            status = grpc_status(ex)
            await context.abort(status.code, status.details, status.trailing_metadata)
        await super().handle_exception(ex, request_or_iterator, context, method_name)


def binary_body_problem(body: bytes, json_length: str | None) -> str | None:
    """What is wrong with a REST request in OIP's binary extension (a JSON header of Inference-Header-Content-Length
    bytes, then each binary input's bytes in order), naming the input; None if nothing found here. kserve decodes
    BYTES elements to str (UTF-8) as it reads such a body, so an element that is not UTF-8 cannot reach a
    predictor."""
    try:
        n = int(json_length or "")
    except ValueError:
        return f"header Inference-Header-Content-Length must be an integer, got {json_length!r}"
    if not 0 < n <= len(body):
        return f"Inference-Header-Content-Length {n} is outside the body's {len(body)} bytes"
    try:
        head = json.loads(body[:n])
    except ValueError:
        return f"the first {n} bytes (Inference-Header-Content-Length) are not a JSON object"
    if not isinstance(head, dict) or not isinstance(head.get("inputs"), list):
        return "the JSON header must be an object with an 'inputs' list"
    offset = n
    for k, inp in enumerate(head["inputs"]):
        if not isinstance(inp, dict) or not isinstance(inp.get("name"), str):
            return f"inputs[{k}] must be an object with a name"
        name, size = inp["name"], (inp.get("parameters") or {}).get("binary_data_size")
        if size is None:
            continue
        if not isinstance(size, int) or size < 0 or offset + size > len(body):
            return f"input {name!r}: binary_data_size {size!r} goes past the end of the body"
        chunk, offset = body[offset:offset + size], offset + size
        if inp.get("datatype") != "BYTES":
            dtype = to_np_dtype(inp.get("datatype"))
            shape = inp.get("shape")
            if dtype is not None and isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape):
                want = int(np.prod(shape)) * np.dtype(dtype).itemsize
                if size != want:
                    return (f"input {name!r}: {size} bytes of binary data, but {inp['datatype']} {shape} takes "
                            f"{want}")
            continue
        pos = i = 0
        while pos < len(chunk):  # elements: a 4-byte little-endian length, then the bytes
            if pos + 4 > len(chunk):
                return f"input {name!r}: element {i} has a truncated length prefix"
            length = int.from_bytes(chunk[pos:pos + 4], "little")
            pos += 4
            if pos + length > len(chunk):
                return f"input {name!r}: element {i} is longer than the input's binary data"
            try:
                chunk[pos:pos + length].decode("utf-8")
            except UnicodeDecodeError as e:
                return f"{name}[{i}] is not valid UTF-8 (byte {e.start}); BYTES over HTTP carry UTF-8 text"
            pos, i = pos + length, i + 1
    return None


class ReadingDataPlane(DataPlane):
    """kserve's DataPlane, but a REST body that kserve's decoder fails on with anything but InvalidInput (KeyError,
    ValueError, struct.error, its InferenceError for non-UTF-8 BYTES: all 500s) is an InvalidInput (400), naming
    the input where binary_body_problem finds it."""

    def decode_inference_request(self, body, headers, model_name):
        try:
            return super().decode_inference_request(body, headers, model_name)
        except InvalidInput:
            raise
        except Exception as exc:  # noqa: BLE001 - the body could not be read: the caller's fault
            problem = None
            if isinstance(body, bytes):
                problem = binary_body_problem(body, (headers or {}).get("inference-header-content-length"))
            raise InvalidInput(problem or f"the request body cannot be read: {exc}") from None


# ---------------------------------------------------------------------------------------------- serving
PUBLIC_HTTP = re.compile(r"^/(|metrics|v2/health/(live|ready)|v2/models/[^/]+(/versions/[^/]+)?/ready)$")
PUBLIC_GRPC = frozenset(f"/inference.GRPCInferenceService/{m}" for m in ("ServerLive", "ServerReady", "ModelReady"))


def in_cluster() -> bool:
    """Inside a Kubernetes pod (the kubelet sets KUBERNETES_SERVICE_HOST in every container)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


class TenantTokens:
    """`Authorization: Bearer <praxon API token>` of one tenant, looked up and cached as the platform's
    gRPC server's Authenticator does (services.common.server.TokenLookups)."""

    def __init__(self, pool, tenant_id: str, cache_seconds: float = 30.0, negative_cache_seconds: float = 2.0):
        from services.common.server import TokenLookups

        self.tenant_id = str(tenant_id)
        self.lookups = TokenLookups(pool, cache_seconds, negative_cache_seconds)

    async def check(self, header: str) -> str | None:
        """None when the header carries a live token of this tenant, else why not (one line for the caller)."""
        from services.common.server import bearer_token

        header = header or ""
        token = bearer_token(header)
        if token is None:
            return "missing bearer token (Authorization: Bearer <praxon API token>)"
        found = await self.lookups.identity(header, token)
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
    it would kserve's. Both servers decode with ReadingDataPlane and answer errors by the rule in the module
    docstring (install_error_handlers on the REST app, StatusInterceptor in place of kserve's on gRPC). If a kserve upgrade moves these attributes, start fails loudly rather than binding every
    interface (and tests/platform/test_predictor_access.py checks the listening addresses)."""
    from concurrent import futures

    from kserve import ModelServer
    from kserve.model_server import app, args
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
    from kserve.protocol.grpc.interceptors import LoggingInterceptor
    from kserve.protocol.grpc.server import GRPCServer
    from kserve.protocol.grpc.servicer import InferenceServicer
    from kserve.protocol.rest.server import RESTServer

    from services.common.server import generic_methods_only

    class HostGRPCServer(GRPCServer):
        async def start(self, max_workers):
            interceptors = [LoggingInterceptor(), StatusInterceptor()]
            if tokens is not None:
                interceptors.insert(0, BearerAuthInterceptor(tokens))  # before anything reads the request
            self._server = grpc.aio.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                                           interceptors=interceptors, options=[
                ("grpc.max_send_message_length", self._kwargs.get("grpc_max_send_message_length")),
                ("grpc.max_receive_message_length", self._kwargs.get("grpc_max_receive_message_length"))])
            generic_methods_only(self._server)
            grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
                InferenceServicer(self._data_plane, self._model_repository_extension), self._server)
            address = f"[{host}]:{self._port}" if ":" in host else f"{host}:{self._port}"
            if self._server.add_insecure_port(address) == 0:
                raise RuntimeError(f"cannot listen on {address}")
            await self._server.start()
            await self._server.wait_for_termination()

    class PredictorServer(ModelServer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dataplane = ReadingDataPlane(model_registry=self.registered_models)  # both servers decode with it

        async def _serve(self):
            if not isinstance(self._rest_server, RESTServer) or self._grpc_server is not None:
                raise RuntimeError("kserve's ModelServer changed: cannot bind the predictor to one host")
            self._rest_server.config.host = host
            self._grpc_server = HostGRPCServer(grpc_port, self.dataplane, self.model_repository_extension,
                                               kwargs=vars(args), grace_period=self.grace_period)
            self.servers.append(self._grpc_server.start(self.max_threads))
            await super()._serve()

    install_error_handlers(app)
    if tokens is not None:
        app.add_middleware(BearerAuthMiddleware, tokens=tokens)
    return PredictorServer(http_port=http_port, grpc_port=grpc_port, workers=1, enable_grpc=False)
