"""The server's one generic handler (Dispatcher): every call goes through it, for the request id, metrics, error
mapping, the bearer token and the request limits, without a grpc interceptor chain; and generic_methods_only, which
keeps grpc from registering each method with its core (both measured: benchmarks/platform/RESULTS.md)."""
from __future__ import annotations

import asyncio
import logging
import traceback
from typing import TYPE_CHECKING, Any

import grpc

from services.common.errors import InvalidArgument, PraxonError
from services.common.server.context import _call, _call_metadata, current_request_id
from services.common.server.status import to_status

if TYPE_CHECKING:
    from services.common.server.auth import Authenticator
    from services.common.server.limits import RequestLimits
    from services.common.server.metrics import RpcMetrics

log = logging.getLogger(__name__)

# Calls that need no token: health checks and reflection (so external tools can discover the API).
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


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

    def __init__(self, auth: Authenticator, limits: RequestLimits, metrics: RpcMetrics):
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

