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
that code to (400, 404, 409, 429 and 503 with Retry-After, ...). A refused request is the caller's business, not the
server's: it is logged at INFO, one line without a traceback (kserve's own handlers log every refusal as ERROR with
one).

Inputs are checked against the declared specs before a predictor reads them (DeclaredModel.check_inputs): an input
the model does not declare, a datatype other than the declared one, or a shape whose rank or fixed sizes differ is
refused naming the input (Triton's rule too).

Triton's model configuration and repository index (what tritonclient's get_model_config and
get_model_repository_index call, and what Triton's and KServe's tooling read first), over both protocols: the
predictor's declared specs as a Triton ModelConfig (max_batch_size 0: the dims are the whole shape, -1 variable),
and the served models with their state. kserve 0.21 has neither; the gRPC messages come from triton_messages(), a
private protobuf pool, since kserve's and tritonclient's generated OIP modules both claim the `inference` package."""
from __future__ import annotations

import json
import logging
import math
import os
import re
import uuid
from dataclasses import dataclass
from functools import cache

import grpc
import numpy as np
from fastapi import Request  # at module level: FastAPI resolves the endpoints' (string) annotations here
from kserve import Model
from kserve.errors import InvalidInput, ModelNotFound
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor
from kserve.protocol.infer_type import InferRequest, InferResponse
from kserve.utils.numpy_codec import to_np_dtype

from services.common.errors import InvalidArgument, PraxonError, ResourceExhausted, Unavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # -1: variable
    optional: bool = False  # an input a request may leave out

    def as_metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    def as_triton(self, output: bool = False) -> dict:
        """This tensor in a Triton ModelConfig's JSON form (model_config.proto's ModelInput / ModelOutput)."""
        out = {"name": self.name, "data_type": TRITON_TYPES.get(self.datatype, "TYPE_INVALID"), "dims": list(self.shape)}
        if not output:
            out["optional"] = self.optional
        return out

    def describe(self) -> str:
        return f"{self.datatype} {list(self.shape)}"


# OIP datatypes -> Triton's DataType enum (model_config.proto; BYTES is TYPE_STRING there)
TRITON_TYPES = {"BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16", "UINT32": "TYPE_UINT32",
                "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8", "INT16": "TYPE_INT16", "INT32": "TYPE_INT32",
                "INT64": "TYPE_INT64", "FP16": "TYPE_FP16", "FP32": "TYPE_FP32", "FP64": "TYPE_FP64",
                "BYTES": "TYPE_STRING", "BF16": "TYPE_BF16"}
TRITON_TYPE_NUMBERS = {"TYPE_INVALID": 0, "TYPE_BOOL": 1, "TYPE_UINT8": 2, "TYPE_UINT16": 3, "TYPE_UINT32": 4,
                       "TYPE_UINT64": 5, "TYPE_INT8": 6, "TYPE_INT16": 7, "TYPE_INT32": 8, "TYPE_INT64": 9,
                       "TYPE_FP16": 10, "TYPE_FP32": 11, "TYPE_FP64": 12, "TYPE_STRING": 13, "TYPE_BF16": 14}


class DeclaredModel(Model):
    """A kserve Model whose model metadata and Triton model config are the tensor specs it declares in INPUTS and
    OUTPUTS, and whose requests must match them (check_inputs)."""

    INPUTS: tuple[TensorSpec, ...] = ()
    OUTPUTS: tuple[TensorSpec, ...] = ()

    def get_input_types(self) -> list[dict]:
        return [t.as_metadata() for t in self.INPUTS]

    def get_output_types(self) -> list[dict]:
        return [t.as_metadata() for t in self.OUTPUTS]

    def check_inputs(self, payload: InferRequest) -> None:
        """InvalidInput naming the input unless every input of the request is declared, given once, of the
        declared datatype and of a shape with the declared rank and fixed sizes (-1: any size), and every
        required input is there."""
        specs = {t.name: t for t in self.INPUTS}
        seen: set[str] = set()
        for inp in payload.inputs:
            spec = specs.get(inp.name)
            if spec is None:
                raise InvalidInput(f"input {inp.name!r} is not an input of model {self.name!r}; its inputs: "
                                   + ", ".join(f"{t.name!r} ({t.describe()})" for t in self.INPUTS))
            if inp.name in seen:
                raise InvalidInput(f"input {inp.name!r} is given more than once")
            seen.add(inp.name)
            if inp.datatype != spec.datatype:
                raise InvalidInput(f"input {inp.name!r} must be {spec.datatype} (declared {spec.describe()}), "
                                   f"got {inp.datatype}")
            shape = [int(d) for d in inp.shape]
            if len(shape) != len(spec.shape) or any(d < 0 or (want != -1 and d != want)
                                                    for d, want in zip(shape, spec.shape, strict=False)):
                raise InvalidInput(f"input {inp.name!r} must have shape {list(spec.shape)} (-1: any size), got "
                                   f"{shape}")
        for spec in self.INPUTS:
            if not spec.optional and spec.name not in seen:
                raise InvalidInput(f"input {spec.name!r} ({spec.describe()}) is required")

    def triton_config(self) -> dict:
        """The model's configuration in Triton's JSON form (GET /v2/models/{name}/config)."""
        return {"name": self.name, "platform": "", "backend": "praxon", "max_batch_size": 0,
                "input": [t.as_triton() for t in self.INPUTS], "output": [t.as_triton(True) for t in self.OUTPUTS]}


def triton_config(model) -> dict:
    """Any served model's Triton configuration: a DeclaredModel's own, else its name with no tensors declared."""
    if isinstance(model, DeclaredModel):
        return model.triton_config()
    return {"name": model.name, "platform": "", "backend": "praxon", "max_batch_size": 0, "input": [], "output": []}


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


def refused(where: str, exc: BaseException) -> None:
    """Log a request refused for the caller's fault: INFO, one line, no traceback."""
    log.info("refused %s: %s", where, getattr(exc, "reason", None) or exc)


def install_error_handlers(app) -> None:
    """On a predictor's FastAPI app: project errors -> http_error(); kserve's InvalidInput -> 400 and ModelNotFound
    -> 404, in OIP's error shape, logged by refused() (kserve's handlers log them as ERROR with a traceback); a body
    FastAPI cannot validate as an OIP request -> 400 in OIP's error shape (FastAPI's default is 422 with its own
    shape). kserve's RESTServer adds its own handlers when it starts: predictor_server() installs these again
    after it."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    async def praxon_error(request, exc: PraxonError):
        status, body, headers = http_error(exc)
        if status < 500:
            refused(f"{request.method} {request.url.path}", exc)
        return JSONResponse(body, status_code=status, headers=headers)

    async def invalid_input(request, exc: InvalidInput):
        refused(f"{request.method} {request.url.path}", exc)
        return JSONResponse({"error": str(exc)}, status_code=400)

    async def model_not_found(request, exc: ModelNotFound):
        refused(f"{request.method} {request.url.path}", exc)
        return JSONResponse({"error": str(exc)}, status_code=404)

    async def invalid_body(request, exc: RequestValidationError):
        # the infer body is Union[InferenceRequest, bytes]: report the OIP branch's problems, not the bytes one's
        errors = [e for e in exc.errors() if "bytes" not in e.get("loc", ())] or list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        where = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:] if p != 'InferenceRequest') or 'body'}: "
                          f"{e.get('msg', '')}" for e in errors[:3])
        return JSONResponse({"error": f"not an Open Inference Protocol v2 request: {where}"}, status_code=400)

    app.add_exception_handler(PraxonError, praxon_error)
    app.add_exception_handler(InvalidInput, invalid_input)
    app.add_exception_handler(ModelNotFound, model_not_found)
    app.add_exception_handler(RequestValidationError, invalid_body)


class StatusInterceptor(ExceptionToStatusInterceptor):
    """kserve's exception-to-status interceptor, plus the project's errors with the platform's codes and details
    (kserve's would make them INTERNAL)."""

    async def handle_exception(self, ex, request_or_iterator, context, method_name):
        if isinstance(ex, PraxonError):
            status = grpc_status(ex)
            if status.code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
                refused(method_name, ex)
            await context.abort(status.code, status.details, status.trailing_metadata)
        if isinstance(ex, InvalidInput):  # the caller's fault: INFO, no traceback (kserve: ERROR with one)
            refused(method_name, ex)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, ex.reason)
        if isinstance(ex, ModelNotFound):
            refused(method_name, ex)
            await context.abort(grpc.StatusCode.NOT_FOUND, ex.reason)
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


# ---------------------------------------------------------------------------------------------- Triton's extensions
@cache
def triton_messages() -> dict[str, type]:
    """The messages of Triton's ModelConfig and RepositoryIndex RPCs (grpc_service.proto, model_config.proto), the
    fields praxon fills, with Triton's field numbers (so tritonclient decodes them), built in a protobuf pool of
    their own: kserve's generated OIP module already holds `inference.*` in the default pool, without these."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FieldDescriptorProto
    optional, repeated = fdp.LABEL_OPTIONAL, fdp.LABEL_REPEATED

    def message(name: str, *fields: tuple, nested: tuple = ()) -> descriptor_pb2.DescriptorProto:
        m = descriptor_pb2.DescriptorProto(name=name, nested_type=list(nested))
        for field_name, number, kind, label, *type_name in fields:
            m.field.add(name=field_name, number=number, type=kind, label=label,
                        **({"type_name": type_name[0]} if type_name else {}))
        return m

    text, i64, i32, flag, msg = fdp.TYPE_STRING, fdp.TYPE_INT64, fdp.TYPE_INT32, fdp.TYPE_BOOL, fdp.TYPE_MESSAGE
    file = descriptor_pb2.FileDescriptorProto(name="praxon/triton_subset.proto", package="inference", syntax="proto3")
    file.message_type.extend([
        message("ModelConfigRequest", ("name", 1, text, optional), ("version", 2, text, optional)),
        # data_type is Triton's DataType enum: an enum is a varint on the wire, as an int32 is
        message("ModelInput", ("name", 1, text, optional), ("data_type", 2, i32, optional),
                ("dims", 4, i64, repeated), ("optional", 8, flag, optional)),
        message("ModelOutput", ("name", 1, text, optional), ("data_type", 2, i32, optional),
                ("dims", 3, i64, repeated)),
        message("ModelConfig", ("name", 1, text, optional), ("platform", 2, text, optional),
                ("max_batch_size", 4, i32, optional), ("input", 5, msg, repeated, ".inference.ModelInput"),
                ("output", 6, msg, repeated, ".inference.ModelOutput"), ("backend", 17, text, optional)),
        message("ModelConfigResponse", ("config", 1, msg, optional, ".inference.ModelConfig")),
        message("RepositoryIndexRequest", ("repository_name", 1, text, optional), ("ready", 2, flag, optional)),
        message("RepositoryIndexResponse", ("models", 1, msg, repeated, ".inference.RepositoryIndexResponse.ModelIndex"),
                nested=(message("ModelIndex", ("name", 1, text, optional), ("version", 2, text, optional),
                                ("state", 3, text, optional), ("reason", 4, text, optional)),)),
    ])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    names = ("ModelConfigRequest", "ModelConfigResponse", "RepositoryIndexRequest", "RepositoryIndexResponse")
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{n}")) for n in names}


async def repository_index(registry, ready_only: bool = False) -> list[dict]:
    """The served models in Triton's repository index form: name, version ("" = the one served), state and
    reason."""
    out = []
    for name in sorted(registry.get_models()):
        is_ready = bool(await registry.is_model_ready(name))
        if ready_only and not is_ready:
            continue
        out.append({"name": name, "version": "", "state": "READY" if is_ready else "UNAVAILABLE",
                    "reason": "" if is_ready else "not loaded"})
    return out


def served_model(registry, name: str):
    model = registry.get_model(name)
    if model is None:
        raise ModelNotFound(name)
    return model


def register_triton_endpoints(app, dataplane: DataPlane) -> None:
    """GET /v2/models/{name}[/versions/{version}]/config and POST /v2/repository/index, as Triton answers them, for
    the models of `dataplane` (kserve's REST app is one per process: the routes are added once, and answer for the
    data plane registered last)."""
    from fastapi import APIRouter

    app.state.praxon_triton_registry = dataplane.model_registry
    if getattr(app.state, "praxon_triton_routes", False):
        return
    app.state.praxon_triton_routes = True
    router = APIRouter(prefix="/v2", tags=["Triton"])

    async def config(request: Request, model_name: str, model_version: str | None = None) -> dict:
        return triton_config(served_model(request.app.state.praxon_triton_registry, model_name))

    async def index(request: Request) -> list[dict]:
        body = await request.body()
        try:
            options = json.loads(body) if body.strip() else {}
        except ValueError:
            raise InvalidInput("the repository index request body is not JSON") from None
        if not isinstance(options, dict):
            raise InvalidInput("the repository index request body must be a JSON object")
        return await repository_index(request.app.state.praxon_triton_registry, bool(options.get("ready", False)))

    router.add_api_route("/models/{model_name}/config", config, methods=["GET"])
    router.add_api_route("/models/{model_name}/versions/{model_version}/config", config, methods=["GET"])
    router.add_api_route("/repository/index", index, methods=["POST"])
    app.include_router(router)


def triton_grpc_handler(dataplane: DataPlane) -> grpc.GenericRpcHandler:
    """inference.GRPCInferenceService's ModelConfig and RepositoryIndex methods, beside kserve's servicer (whose
    generic handler answers only its own methods)."""
    m = triton_messages()
    registry = dataplane.model_registry

    async def model_config(request, context):
        config = triton_config(served_model(registry, request.name))
        tensors = {"input": [], "output": []}
        for key in tensors:
            for t in config[key]:
                tensors[key].append(dict(t, data_type=TRITON_TYPE_NUMBERS.get(t["data_type"], 0)))
        return m["ModelConfigResponse"](config={**config, **tensors})

    async def index(request, context):
        return m["RepositoryIndexResponse"](models=await repository_index(registry, request.ready))

    def unary(fn, request_type):
        return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=request_type.FromString,
                                                   response_serializer=lambda r: r.SerializeToString())
    return grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelConfig": unary(model_config, m["ModelConfigRequest"]),
        "RepositoryIndex": unary(index, m["RepositoryIndexRequest"])})


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
            self._server.add_generic_rpc_handlers((triton_grpc_handler(self._data_plane),))
            address = f"[{host}]:{self._port}" if ":" in host else f"{host}:{self._port}"
            if self._server.add_insecure_port(address) == 0:
                raise RuntimeError(f"cannot listen on {address}")
            await self._server.start()
            await self._server.wait_for_termination()

    class PredictorServer(ModelServer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dataplane = ReadingDataPlane(model_registry=self.registered_models)  # both servers decode with it
            register_triton_endpoints(app, self.dataplane)

        async def _serve(self):
            if not isinstance(self._rest_server, RESTServer) or self._grpc_server is not None:
                raise RuntimeError("kserve's ModelServer changed: cannot bind the predictor to one host")
            self._rest_server.config.host = host
            rest, kserve_handlers = self._rest_server, self._rest_server._add_exception_handlers

            def add_exception_handlers(rest_app):  # kserve's, then ours over them (see install_error_handlers)
                kserve_handlers(rest_app)
                install_error_handlers(rest_app)
            rest._add_exception_handlers = add_exception_handlers
            self._grpc_server = HostGRPCServer(grpc_port, self.dataplane, self.model_repository_extension,
                                               kwargs=vars(args), grace_period=self.grace_period)
            self.servers.append(self._grpc_server.start(self.max_threads))
            await super()._serve()

    install_error_handlers(app)
    if tokens is not None:
        app.add_middleware(BearerAuthMiddleware, tokens=tokens)
    return PredictorServer(http_port=http_port, grpc_port=grpc_port, workers=1, enable_grpc=False)
