"""The gRPC server every service runs: asyncio, health, reflection, and one generic handler in front of every method
(Dispatcher) for authentication (bearer tokens -> tenant), request ids, error mapping (project errors ->
google.rpc.Status with details), Prometheus metrics, deadlines and message-size limits; graceful shutdown."""
from __future__ import annotations

import asyncio
import collections
import contextvars
import hashlib
import itertools
import logging
import math
import random
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import grpc
import numpy as np
from google.protobuf import any_pb2, descriptor, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString
from psycopg_pool import ConnectionPool

from services.common import db
from services.common.errors import (AlreadyExists, Cancelled, FailedPrecondition, InvalidArgument, NotFound,
                                    PraxonError, ResourceExhausted, Unauthenticated, Unavailable, transient)
from services.common.jobs import JobQuota, JobStore
from services.common.registry import Registry
from services.common.settings import Settings
from services.common.store import ArtifactStore

log = logging.getLogger(__name__)
_FD = descriptor.FieldDescriptor

DOMAIN = "praxon.dev"
# the call's (caller, request id): the caller's identity (db.token_identity: tenant_id, token_id, token_name; the
# cached dict, never changed; None on health and reflection) and the client's x-request-id ("" until one is made).
# One variable, set once per call: each set costs about 1.5k instructions, 0.3% of a trivial call.
_call: contextvars.ContextVar[tuple[dict | None, str]] = contextvars.ContextVar("praxon_call", default=(None, ""))
# the call's metadata as grpc handed it to the Dispatcher (each call runs in its own task, so its own context)
_call_metadata: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("praxon_call_metadata", default=None)

# Calls that need no token: health checks and reflection (so external tools can discover the API).
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def current_tenant() -> str:
    """The authenticated caller's tenant id (set by the Dispatcher)."""
    caller = _call.get()[0]
    if caller is None:
        raise LookupError("no authenticated caller in this context")
    return caller["tenant_id"]


def current_request_id() -> str:
    """The call's request id: the client's x-request-id, or one made the first time it is asked for (most calls
    never need one, so none is made for them)."""
    caller, rid = _call.get()
    if not rid:
        rid = f"{_request_ids.getrandbits(128):032x}"
        _call.set((caller, rid))
    return rid


def current_token() -> tuple[str, str]:
    """(token id, token name) the caller authenticated with (set by the Dispatcher; empty outside a call)."""
    caller = _call.get()[0]
    return (caller["token_id"], caller["token_name"]) if caller is not None else ("", "")


@dataclass
class AppContext:
    """What servicers share in one process; built once in __main__/the CLI and passed down."""

    settings: Settings
    pool: ConnectionPool
    store: ArtifactStore
    jobs: JobStore
    registry: Registry
    extras: dict[str, Any] = field(default_factory=dict)

    async def db(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking database/store work off the event loop."""
        return await asyncio.to_thread(fn, *args)


# ---------------------------------------------------------------- error mapping
_CODES: list[tuple[type[PraxonError], grpc.StatusCode]] = [
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT), (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS), (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED), (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (Cancelled, grpc.StatusCode.CANCELLED), (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
]


def _pack(msg) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(msg)
    return out


def _backing_service_down(exc: BaseException) -> bool:
    """The database or the object store could not be reached, failed transiently or is full: the caller should
    retry (later)."""
    from minio.error import S3Error

    return transient(exc) or (isinstance(exc, S3Error) and exc.code == "XMinioStorageFull")


def to_status(exc: BaseException, request_id: str) -> grpc.Status:
    if not isinstance(exc, PraxonError) and _backing_service_down(exc):
        exc = Unavailable(f"a backing service (database or object store) is unavailable; retry (request id "
                          f"{request_id})", retry_after_s=2.0, reason="BACKEND_UNAVAILABLE")
    if isinstance(exc, PraxonError):
        code = next((c for t, c in _CODES if isinstance(exc, t)), grpc.StatusCode.INTERNAL)
        message = exc.message
        details = [_pack(error_details_pb2.ErrorInfo(reason=exc.reason, domain=DOMAIN,
                                                     metadata={**exc.metadata, "request_id": request_id}))]
        if isinstance(exc, InvalidArgument):
            details.append(_pack(error_details_pb2.BadRequest(field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                for v in exc.violations])))
        if isinstance(exc, (Unavailable, ResourceExhausted)):
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(int(exc.retry_after_s * 1e9))
            details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    else:
        code = grpc.StatusCode.INTERNAL
        message = f"internal error (request id {request_id})"
        details = [_pack(error_details_pb2.ErrorInfo(reason="INTERNAL", domain=DOMAIN,
                                                     metadata={"request_id": request_id}))]
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=details)
    return rpc_status.to_status(status)


# ---------------------------------------------------------------- call handling
# a request id is a correlation key, not a secret: 128 random bits from a fast generator of the server's own (the
# global one is the embedding program's: a server in its process must not move its seeded state)
_request_ids = random.Random()
# (module names for what every call runs: a global name is one lookup where time.monotonic is two)
_current_task, _monotonic = asyncio.current_task, time.monotonic


class Dispatcher(grpc.GenericRpcHandler):
    """The server's one generic handler. It finds each method's handler among the services' own handlers once,
    wraps it with every concern around a servicer call, and hands grpc the wrapped handler on every call. The
    concerns, in this order: the request id (taken from x-request-id, or made when first asked for; echoed in an
    error's trailing metadata), Prometheus metrics, errors (project errors -> their status with details, anything
    else -> INTERNAL with the request id; request bytes that do not parse -> INVALID_ARGUMENT), the bearer token
    (Authenticator; not for health and reflection) and the request limits (RequestLimits). They run in one coroutine
    in the servicer's task, so context variables set here are visible to the servicer.

    Why not a grpc.aio ServerInterceptor: grpc awaits an interceptor chain on every call (a coroutine per
    interceptor, a partial for its continuation), where a generic handler is one plain call; with the wrapped
    handlers built once there is nothing left for an interceptor to do per call (benchmarks/platform/RESULTS.md).
    install() puts it in front of a server: every service added afterwards is served through it."""

    def __init__(self, auth: Authenticator, limits: RequestLimits, metrics: _Metrics):
        self.auth, self.limits, self.metrics = auth, limits, metrics
        self.services: list[grpc.GenericRpcHandler] = []  # the services' own handlers, asked once per method
        self._handlers: dict[str, Any] = {}

    def install(self, server: grpc.aio.Server) -> grpc.aio.Server:
        """Serve every method `server` will host through this dispatcher: the services' generic handlers are kept
        here, and their methods are not registered with the core (see generic_methods_only). Call before any
        service is added."""
        server.add_generic_rpc_handlers((self,))
        server.add_generic_rpc_handlers = self.services.extend
        return generic_methods_only(server)

    def service(self, details):
        handler = self._handlers.get(details.method)
        if handler is None:
            handler = self._find(details)
            if handler is None:
                return None
        # grpc converted the metadata for this call: the handler reuses it (grpc asks this from the call's task)
        _call_metadata.set(details.invocation_metadata)
        return handler

    def _find(self, details):
        for generic in self.services:
            handler = generic.service(details)
            if handler is not None:
                self._handlers[details.method] = handler = self.wrap(details.method, handler)
                return handler
        return None  # an unknown method: not cached, so random names cannot grow the map

    def wrap(self, method: str, handler):
        auth = None if method.startswith(PUBLIC_PREFIXES) else self.auth
        limits, deadlines, metrics = self.limits, self.limits.deadlines, self.metrics.of_method(method)
        deserializer = _never_raises(handler.request_deserializer)
        client_streaming = bool(handler.stream_unary or handler.stream_stream)

        def enter(request, context, now: float):
            """Before the servicer: id, decoding, token, limits (a client stream's messages are checked as read).
            Plain code, not a coroutine (every call runs it): None when it is done, or an awaitable that finishes
            it when the token is not cached and must be looked up. The request id goes back to the client with an
            error (_abort), not with every answer: trailing metadata on every answer cost about 10 µs, 4% of a
            trivial call (benchmarks/platform/RESULTS.md)."""
            header = request_id = ""  # request id "": made when first asked for
            caller = None
            for item in _call_metadata.get() or context.invocation_metadata() or ():
                key = item[0]  # (a loop, not dict(): the items are namedtuples, which dict() copies one by one)
                if key == "authorization":
                    header = item[1]
                elif key == "x-request-id":
                    request_id = item[1][:64]
            try:
                if not client_streaming and isinstance(request, Undecodable):
                    raise request.error()
                if auth is not None:
                    caller = auth.cached(header, now)
                    if caller is None:
                        return looked_up(request, header, now, request_id)
            finally:
                _call.set((caller, request_id))  # also before an error, whose answer names the request id
            if not client_streaming:
                limits.check(request)
            return None

        async def looked_up(request, header: str, now: float, request_id: str) -> None:
            _call.set((await auth.authenticate(header, now), request_id))
            if not client_streaming:
                limits.check(request)

        def check(request) -> None:
            if isinstance(request, Undecodable):
                raise request.error()
            limits.check(request)

        async def checked(requests):
            async for item in requests:
                check(item)
                yield item

        if handler.unary_unary or handler.stream_unary:
            inner = handler.unary_unary or handler.stream_unary

            async def unary(request, context):
                start = metrics.start()
                try:
                    pending = enter(request, context, start)
                    if pending is not None:
                        await pending
                    if client_streaming:
                        request = checked(request)
                    if context.time_remaining() is not None:  # the client's deadline, which grpc enforces
                        return await inner(request, context)
                    task = deadlines.watch(start)  # none: the server's default
                    try:
                        return await inner(request, context)
                    except asyncio.CancelledError:
                        if not deadlines.expired(task):
                            raise
                        await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                            f"server deadline of {limits.default_deadline_s}s exceeded")
                    finally:
                        deadlines.unwatch(task)
                except (grpc.aio.AbortError, asyncio.CancelledError):
                    raise
                except Exception as exc:  # noqa: BLE001 - mapped to a status here, once
                    await _abort(method, exc, context)
                finally:
                    metrics.done(start, context)
            factory = grpc.unary_unary_rpc_method_handler if handler.unary_unary else grpc.stream_unary_rpc_method_handler
            return factory(unary, request_deserializer=deserializer, response_serializer=handler.response_serializer)
        inner = handler.unary_stream or handler.stream_stream

        async def streaming(request, context):
            start = metrics.start()
            try:
                pending = enter(request, context, start)
                if pending is not None:
                    await pending
                async for item in _aiter(inner(checked(request) if client_streaming else request, context)):
                    yield item
            except (grpc.aio.AbortError, asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001
                await _abort(method, exc, context)
            finally:
                metrics.done(start, context)
        factory = grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
        return factory(streaming, request_deserializer=deserializer, response_serializer=handler.response_serializer)


async def _abort(method: str, exc: BaseException, context) -> None:
    rid = current_request_id()
    if not isinstance(exc, PraxonError):
        log.error("unhandled error in %s (request id %s):\n%s", method, rid, traceback.format_exc())
        # (a backing service that is down is logged too, and answered UNAVAILABLE by to_status)
    status = to_status(exc, rid)
    await context.abort(status.code, status.details, (*status.trailing_metadata, ("x-request-id", rid)))


async def _aiter(result):
    """Servicer streaming methods may be async generators or return (async) iterables."""
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    else:
        for item in await result if asyncio.iscoroutine(result) else result:
            yield item


class Undecodable:
    """What a request body that is not a valid message deserializes to (bytes that do not parse, or nesting
    deeper than protobuf's recursion limit): the Dispatcher answers it with INVALID_ARGUMENT."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def error(self) -> InvalidArgument:
        return InvalidArgument("request", f"the request body is not a valid {self.type_name} (bytes that do not "
                               "parse, or messages nested deeper than the protobuf limit)", reason="MALFORMED_REQUEST")


def _never_raises(deserialize):
    if deserialize is None:
        return None
    type_name = getattr(getattr(getattr(deserialize, "__self__", None), "DESCRIPTOR", None), "full_name", "message")

    def safe(data: bytes):
        try:
            return deserialize(data)
        except Exception:  # noqa: BLE001 - any parse failure is the caller's bad bytes, answered by the Dispatcher
            return Undecodable(type_name)
    return safe


class TokenBuckets:
    """Request rate per API token: `rate` calls per second sustained, `burst` at once. Over it, a call gets
    RESOURCE_EXHAUSTED with RetryInfo saying when the next one is allowed (per process: each replica counts its
    own calls). At most `max_tokens` buckets are kept: a full table first drops every bucket that has refilled to
    its burst (it holds nothing a new bucket would not), else the oldest one."""

    def __init__(self, rate: float, burst: int, max_tokens: int = 10_000):
        self.rate, self.burst, self.max_tokens = float(rate), float(burst), max_tokens
        self._buckets: dict[str, list[float]] = {}  # token id -> [level, last refill time], changed in place

    def take(self, key: str, now: float | None = None) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic() if now is None else now
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_tokens:
                self._make_room(now)
            bucket = self._buckets[key] = [self.burst, now]
        level = bucket[0] + (now - bucket[1]) * self.rate
        if level > self.burst:
            level = self.burst
        bucket[1] = now
        if level < 1.0:
            bucket[0] = level
            raise ResourceExhausted(f"request rate limit of {self.rate:g}/s for this API token exceeded",
                                    retry_after_s=(1.0 - level) / self.rate, reason="RATE_LIMITED")
        bucket[0] = level - 1.0

    def _make_room(self, now: float) -> None:
        refilled = [key for key, (level, last) in self._buckets.items()
                    if level + (now - last) * self.rate >= self.burst]
        for key in refilled or [next(iter(self._buckets))]:
            del self._buckets[key]


class TtlCache:
    """A bounded map whose entries live `seconds` (0: nothing is kept); at capacity the least recently used entry
    is dropped, so a flood of new keys evicts old ones one at a time and never grows memory or empties the cache."""

    def __init__(self, seconds: float, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.max_entries, self.clock = seconds, max(1, max_entries), clock
        self._entries: collections.OrderedDict[Any, tuple[float, Any]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Any, now: float | None = None) -> Any | None:
        """The live value of `key`, or None; `now`: the clock's time, when the caller has read it already."""
        hit = self._entries.get(key)
        if hit is None:
            return None
        if hit[0] <= (self.clock() if now is None else now):
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return hit[1]

    def put(self, key: Any, value: Any) -> None:
        if self.seconds <= 0:
            return
        self._entries.pop(key, None)
        while len(self._entries) >= self.max_entries:
            self._entries.popitem(last=False)
        self._entries[key] = (self.clock() + self.seconds, value)


class TokenLookups:
    """Authorization header -> the live identity of its API token (db.token_identity: tenant_id, token_id,
    token_name; None for an unknown, revoked or expired token), cached per process and keyed by a digest of the
    header (_cache_key), so that a cached call needs neither the header parsed nor the token held: a live token for
    `cache_seconds` (a revoked or expired one stops working within that), an unknown one for
    `negative_cache_seconds` (so a flood of bad tokens costs the database one lookup per token per period; a token
    created after a miss works at most that long later). Concurrent callers with the same uncached header share one
    lookup. Used on one event loop: the gRPC server's (Dispatcher) and the predictors' (services.common.oip)."""

    def __init__(self, pool: ConnectionPool, cache_seconds: float = 30.0, negative_cache_seconds: float = 2.0, *,
                 max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.pool = pool
        self._known = TtlCache(cache_seconds, max_entries, clock)              # -> identity
        self._unknown = TtlCache(negative_cache_seconds, max_entries, clock)   # -> True
        self._lookups: dict[bytes, asyncio.Future] = {}                        # in flight

    def cached(self, header: str, now: float | None = None) -> dict | None:
        """The live identity of the header's token if it is cached (no await: the common case of every call)."""
        return self._known.get(_cache_key(header), now)

    async def identity(self, header: str, token: str) -> dict | None:
        """The live identity of `token`, the bearer token the caller parsed from `header`."""
        key = _cache_key(header)
        hit = self._known.get(key)
        if hit is not None or self._unknown.get(key) is not None:
            return hit
        task = self._lookups.get(key)
        if task is None:
            def lookup() -> dict | None:
                with self.pool.connection() as conn:
                    return db.token_identity(conn, token)
            task = self._lookups[key] = asyncio.ensure_future(asyncio.to_thread(lookup))

            def done(t: asyncio.Future) -> None:
                self._lookups.pop(key, None)
                if not t.cancelled() and t.exception() is None:
                    found = t.result()
                    if found is None:
                        self._unknown.put(key, True)
                    else:
                        self._known.put(key, found)
            task.add_done_callback(done)
        return await asyncio.shield(task)  # one caller's cancellation does not cancel it for the others


def bearer_token(header: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header value, or None when it carries none."""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if token and scheme.lower() == "bearer" else None


def _cache_key(header: str) -> bytes:
    """The token caches' key: the header's BLAKE2s digest, so that no cache holds a token itself. Not the database's
    sha256 (db.hash_token): this runs on every call, and CPython's built-in BLAKE2s costs about 3.9k instructions
    where OpenSSL's sha256 costs 6.6k, 1.4% of a trivial call (benchmarks/platform/RESULTS.md)."""
    return hashlib.blake2s(header.encode()).digest()


class Authenticator:
    """Bearer API token -> the caller's identity (tokens are stored hashed; lookups cached by TokenLookups).
    Missing or bad token -> UNAUTHENTICATED; a token over its request rate -> RESOURCE_EXHAUSTED with RetryInfo."""

    def __init__(self, pool: ConnectionPool, cache_seconds: float = 30.0, limits: TokenBuckets | None = None, *,
                 negative_cache_seconds: float = 2.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.limits = limits or TokenBuckets(0, 1)
        self.tokens = TokenLookups(pool, cache_seconds, negative_cache_seconds, max_entries=max_entries, clock=clock)

    def cached(self, header: str, now: float) -> dict | None:
        """authenticate() without waiting, for a token whose identity is cached (the common case of every call);
        None when authenticate() must look the token up."""
        found = self.tokens.cached(header, now)
        if found is not None:
            self.limits.take(found["token_id"], now)
        return found

    async def authenticate(self, header: str, now: float | None = None) -> dict:
        """The caller's identity (db.token_identity) from the call's `authorization` metadata, counted against its
        token's request rate; or raises. `now`: the time of the call on this authenticator's clock, when the caller
        has read it."""
        token = bearer_token(header)
        if token is None:
            raise Unauthenticated("missing bearer token in the 'authorization' metadata", reason="MISSING_TOKEN")
        found = await self.tokens.identity(header, token)  # (it answers from the cache when it can)
        if found is None:
            raise Unauthenticated("invalid or revoked API token", reason="INVALID_TOKEN")
        self.limits.take(found["token_id"], now)
        return found


_STRUCTS = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")


def check_request_content(msg: Any, path: str = "") -> None:
    """The one content rule for every request: no string (field, repeated item, map key or Struct key/value)
    contains a NUL character (PostgreSQL text cannot hold one, and no praxon field means one), and every number in
    a Struct is finite (JSON has no NaN or infinity). Raises InvalidArgument naming the field as the request
    spells it ("extra_params.lr", "items[2].text")."""
    name = msg.DESCRIPTOR.full_name
    if name == "google.protobuf.Value":
        kind = msg.WhichOneof("kind")
        if kind == "string_value":
            _check_text(msg.string_value, path)
        elif kind == "number_value" and not math.isfinite(msg.number_value):
            raise InvalidArgument(path, "must be a finite number", reason="NON_FINITE_NUMBER")
        elif kind == "struct_value":
            check_request_content(msg.struct_value, path)
        elif kind == "list_value":
            check_request_content(msg.list_value, path)
        return
    if name == "google.protobuf.Struct":
        for key, value in msg.fields.items():
            sub = f"{path}.{key}" if path else key
            _check_text(key, sub)
            check_request_content(value, sub)
        return
    if name == "google.protobuf.ListValue":
        for i, value in enumerate(msg.values):
            check_request_content(value, f"{path}[{i}]")
        return
    for fd, value in msg.ListFields():
        sub = f"{path}.{fd.name}" if path else fd.name
        if fd.type == _FD.TYPE_STRING:
            if fd.is_repeated:
                for i, item in enumerate(value):
                    _check_text(item, f"{sub}[{i}]")
            else:
                _check_text(value, sub)
        elif fd.type == _FD.TYPE_MESSAGE:
            if fd.message_type.GetOptions().map_entry:
                key_fd, value_fd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
                for key, item in value.items():
                    item_path = f"{sub}.{key}" if key_fd.type == _FD.TYPE_STRING else f"{sub}[{key}]"
                    if key_fd.type == _FD.TYPE_STRING:
                        _check_text(key, item_path)
                    if value_fd.type == _FD.TYPE_MESSAGE:
                        check_request_content(item, item_path)
                    elif value_fd.type == _FD.TYPE_STRING:
                        _check_text(item, item_path)
            elif fd.is_repeated:
                for i, item in enumerate(value):
                    check_request_content(item, f"{sub}[{i}]")
            else:
                check_request_content(value, sub)


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise InvalidArgument(path or "request", "must not contain a NUL character", reason="NUL_CHARACTER")


class Deadlines:
    """The server's deadline for the calls that came without one: watch() the call's task, unwatch() it when it
    ends. A sweeper thread looks for tasks past their deadline ten times per deadline (at most once a second) and
    has their event loop cancel them. Not a timer per call (asyncio.timeout cost about 6 µs a call, a few percent of
    a trivial RPC), nor a timer on the loop: while one is scheduled, every loop iteration computes a timeout and
    looks at the timer heap; the sweeper task that slept on the loop cost about 10k instructions per trivial call,
    2% (benchmarks/platform/RESULTS.md). A cancelled call is one expired() says was cancelled here; it is then
    un-cancelled, so that the call can answer DEADLINE_EXCEEDED."""

    def __init__(self, seconds: float):
        self.seconds, self.every = seconds, min(1.0, seconds / 10)
        self._due: dict[asyncio.Task, float] = {}   # changed on the loop's thread only
        self._expired: set[asyncio.Task] = set()    # the same
        self._sweeper: threading.Thread | None = None

    def watch(self, now: float | None = None) -> asyncio.Task:
        """Watch the current task from `now` (time.monotonic(), the event loop's clock; read here if not given)."""
        task = _current_task()
        self._due[task] = (time.monotonic() if now is None else now) + self.seconds
        if self._sweeper is None:
            self._sweeper = threading.Thread(target=self._sweep, args=(asyncio.get_running_loop(),),
                                             name="praxon-deadlines", daemon=True)
            self._sweeper.start()
        return task

    def unwatch(self, task: asyncio.Task) -> None:
        self._due.pop(task, None)  # (a task in _expired leaves it in expired(), or when _expire finds it done)

    def expired(self, task: asyncio.Task) -> bool:
        if task not in self._expired:
            return False
        self._expired.discard(task)
        task.uncancel()
        return True

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """The sweeper thread, until its loop is closed (a later loop's watch() starts another)."""
        try:
            while not loop.is_closed():
                time.sleep(self.every)
                now = time.monotonic()
                if any(at <= now for at in list(self._due.values())):  # (list(): one step, under the GIL)
                    loop.call_soon_threadsafe(self._expire, now)
        except RuntimeError:  # the loop closed between the check and the call
            pass
        finally:
            self._sweeper = None

    def _expire(self, now: float) -> None:
        """On the loop's thread: cancel the tasks due by `now`."""
        self._expired = {task for task in self._expired if not task.done()}  # ended before it saw its cancellation
        for task, at in list(self._due.items()):
            if at <= now and task not in self._expired:
                self._expired.add(task)
                task.cancel()


class RequestLimits:
    """Deadlines, message size and content: a unary call without a client deadline gets the server default; a
    request larger than the configured limit is INVALID_ARGUMENT naming its largest field; every request message
    (each one of a client stream too) passes check_request_content."""

    def __init__(self, max_message_bytes: int, default_deadline_s: float):
        self.max_bytes, self.default_deadline_s = max_message_bytes, default_deadline_s
        self.deadlines = Deadlines(default_deadline_s)

    def check(self, request: Any) -> None:
        if hasattr(request, "ByteSize"):
            self._check_size(request)
            check_request_content(request)

    def _check_size(self, request) -> None:
        if request.ByteSize() <= self.max_bytes:
            return
        largest, name = 0, "request"
        for fd, _ in request.ListFields():  # size of each field alone, to name the offender
            probe = type(request)()
            probe.CopyFrom(request)
            for other, _ in request.ListFields():
                if other.name != fd.name:
                    probe.ClearField(other.name)
            if probe.ByteSize() > largest:
                largest, name = probe.ByteSize(), fd.name
        raise InvalidArgument(name, f"request is {request.ByteSize()} bytes; the limit is {self.max_bytes}",
                              reason="MESSAGE_TOO_LARGE")


_LATENCY_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)
_BUCKET_LABELS = [*map(floatToGoString, _LATENCY_BUCKETS), "+Inf"]  # "le" of each count, the last past every bound
_LATENCY_BOUNDS = list(_LATENCY_BUCKETS)  # (for numpy.searchsorted: x <= bound i counts in bucket i, as "le" says)


class _Metrics:
    """The server's RPC metrics (latency histogram and errors by method and code, RPCs in flight by method), kept
    as plain numbers per method and turned into Prometheus families when scraped: a Collector. prometheus_client's
    Histogram, Gauge and Counter cost about 2.2 µs per call here (a lock and a method call per value, a Python loop
    over the buckets), a third of the dispatcher's own cost (benchmarks/platform/RESULTS.md); this costs about 0.5.

    Numbers are kept per method and thread and summed when scraped: a server's calls all run on its event loop's
    thread, so each thread's numbers have one writer and need no lock (a process may run servers on several
    threads)."""

    def __init__(self, registry: CollectorRegistry):
        self._methods: dict[tuple[str, int], _MethodMetrics] = {}
        registry.register(self)

    def of_method(self, method: str) -> _MethodMetrics:
        """Once per method and server, on the server's thread (setdefault: atomic under the GIL)."""
        return self._methods.setdefault((method, threading.get_ident()), _MethodMetrics())

    def describe(self):
        return [HistogramMetricFamily("praxon_grpc_server_handling_seconds", "RPC latency"),
                GaugeMetricFamily("praxon_grpc_server_in_flight", "RPCs in progress"),
                CounterMetricFamily("praxon_grpc_server_errors", "RPCs that ended with a non-OK code")]

    def collect(self):
        latency = HistogramMetricFamily("praxon_grpc_server_handling_seconds", "RPC latency",
                                        labels=["method", "code"])
        in_flight = GaugeMetricFamily("praxon_grpc_server_in_flight", "RPCs in progress", labels=["method"])
        errors = CounterMetricFamily("praxon_grpc_server_errors", "RPCs that ended with a non-OK code",
                                     labels=["method", "code"])
        flying: dict[str, int] = {}
        series: dict[tuple[str, str], tuple[list[int], float]] = {}
        for (method, _), m in list(self._methods.items()):  # summed over the threads
            flying[method] = flying.get(method, 0) + m.in_flight
            for code, latencies in list(m.codes.items()):
                counts, total, _ = _count(latencies)
                summed, summed_total = series.get((method, code)) or ([0] * len(counts), 0.0)
                series[method, code] = [a + b for a, b in zip(summed, counts, strict=True)], summed_total + total
        for method, n in flying.items():
            in_flight.add_metric([method], n)
        for (method, code), (counts, total) in series.items():
            cumulative = list(itertools.accumulate(counts))
            latency.add_metric([method, code], list(zip(_BUCKET_LABELS, cumulative, strict=True)), total)
            if code != "OK":
                errors.add_metric([method, code], cumulative[-1])
        return [latency, in_flight, errors]


_METRICS: dict[CollectorRegistry, _Metrics] = {}  # one collector per registry


def metrics_of(registry: CollectorRegistry = REGISTRY) -> _Metrics:
    if registry not in _METRICS:
        _METRICS[registry] = _Metrics(registry)
    return _METRICS[registry]


_COUNT_EVERY = 1024  # latencies a method keeps per code before it counts them into its buckets


class _MethodMetrics:
    """One method's numbers on one thread: RPCs in flight, and per status code (the count in each latency bucket,
    the last one past every bound; the latencies' sum; the latest latencies, not yet counted).

    A call appends its latency, and every _COUNT_EVERY calls they are counted into the buckets at once (numpy):
    a bucket search and three updates per call cost about 1.5k instructions, 0.3% of a trivial call. The counted
    state is replaced, never changed, so a scrape on another thread reads one consistent state: counts and sum,
    plus the latencies appended since (_count), whatever the writer is doing."""

    def __init__(self):
        self.in_flight = 0
        self.codes: dict[str, tuple[list[int], float, list[float]]] = {}

    def start(self) -> float:
        """The call's start on time.monotonic() (the clock the dispatcher's other checks share)."""
        self.in_flight += 1
        return _monotonic()

    def done(self, start: float, context) -> None:
        seconds = _monotonic() - start
        code = context.code()
        name = "OK" if not code else code.name if isinstance(code, grpc.StatusCode) else str(code)  # None or 0: OK
        self.in_flight -= 1
        latencies = self.codes.get(name)
        if latencies is None:
            latencies = self.codes[name] = ([0] * (len(_LATENCY_BUCKETS) + 1), 0.0, [])
        latencies[2].append(seconds)
        if len(latencies[2]) >= _COUNT_EVERY:
            self.codes[name] = _count(latencies)


def _count(latencies: tuple[list[int], float, list[float]]) -> tuple[list[int], float, list[float]]:
    """(counts, sum, pending latencies) with the pending ones counted: a new state, the old one unchanged."""
    counts, total, pending = latencies
    pending = list(pending)  # (a snapshot: the writer may append meanwhile)
    added = np.bincount(np.searchsorted(_LATENCY_BOUNDS, pending, side="left"), minlength=len(counts))
    return [a + int(b) for a, b in zip(counts, added, strict=True)], total + sum(pending), []


# ---------------------------------------------------------------- server
Registrar = Callable[[grpc.aio.Server, AppContext], Iterable[str]]


def build_app_context(settings: Settings) -> AppContext:
    pool = db.create_pool(settings)
    store = ArtifactStore(settings)
    from services.common.queue import make_celery  # only processes that serve need it
    quota = JobQuota(settings.jobs.max_active_per_tenant, settings.jobs.max_active_per_tenant_kind)
    return AppContext(settings, pool, store, JobStore(pool, make_celery(settings), quota), Registry(pool, store))


def server_credentials(g) -> grpc.ServerCredentials:
    """TLS from the settings' PEM files; with a client CA, mTLS (a client without a certificate it signed is
    refused during the handshake)."""
    from pathlib import Path

    if not g.tls_key_file:
        raise ValueError("PRAXON_GRPC__TLS_CERT_FILE needs PRAXON_GRPC__TLS_KEY_FILE")
    ca = Path(g.tls_client_ca_file).read_bytes() if g.tls_client_ca_file else None
    return grpc.ssl_server_credentials([(Path(g.tls_key_file).read_bytes(), Path(g.tls_cert_file).read_bytes())],
                                       root_certificates=ca, require_client_auth=ca is not None)


def generic_methods_only(server: grpc.aio.Server) -> grpc.aio.Server:
    """Serve the server's methods through the generic handlers only, never as methods registered with the core.

    Why: grpc.aio (1.85) keeps one pending request per registered method and, for every incoming call, awaits
    asyncio.wait over all of them (AioServer._server_main_loop), which adds and removes a callback on each. A
    server hosting every praxon service (62 methods with health and reflection) spent 40% of a trivial call's
    instructions there (benchmarks/platform/grpc_instructions.py). The generated add_*_to_server registers each
    service twice, as a generic handler and as registered methods; the generic handler alone serves the same
    methods, with one pending request whatever the number of methods. Call before any service is added."""
    server.add_registered_method_handlers = _skip_registration
    return server


def _skip_registration(service_name: str, method_handlers: dict) -> None:
    """(see generic_methods_only: the generic handler added with them serves these methods)"""


async def create_server(app: AppContext, registrars: list[Registrar], *, port: int | None = None,
                        metrics_registry: CollectorRegistry = REGISTRY) -> tuple[grpc.aio.Server, int]:
    """Build and start a server hosting the given services; returns (server, bound port). Port 0 picks one."""
    g = app.settings.grpc
    # The transport limit is above the application limit so oversize requests get a clear INVALID_ARGUMENT.
    transport_max = 4 * g.max_message_bytes
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", transport_max),
                                      ("grpc.max_send_message_length", transport_max),
                                      ("grpc.so_reuseport", 0)])
    dispatcher = Dispatcher(Authenticator(app.pool, cache_seconds=g.auth_cache_seconds,
                                          limits=TokenBuckets(g.requests_per_second_per_token,
                                                              g.request_burst_per_token),
                                          negative_cache_seconds=g.auth_negative_cache_seconds),
                            RequestLimits(g.max_message_bytes, g.default_deadline_seconds),
                            metrics_of(metrics_registry))
    dispatcher.install(server)
    names = [name for registrar in registrars for name in registrar(server, app)]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ["", *names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection([*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                                         reflection.SERVICE_NAME], server)
    address = f"{g.host}:{g.port if port is None else port}"
    bound = server.add_secure_port(address, server_credentials(g)) if g.tls_cert_file else \
        server.add_insecure_port(address)
    await server.start()
    server.praxon_health = health_servicer  # graceful shutdown flips it to NOT_SERVING first
    server.praxon_services = names
    server.praxon_dispatcher = dispatcher
    log.info("gRPC server on %s:%d serving %s", g.host, bound, ", ".join(names))
    return server, bound


async def shutdown(server: grpc.aio.Server, grace_seconds: float) -> None:
    """Stop accepting, tell health checkers, finish in-flight calls within the grace period."""
    health_servicer = getattr(server, "praxon_health", None)
    if health_servicer is not None:
        await health_servicer.enter_graceful_shutdown()
    await server.stop(grace_seconds)
