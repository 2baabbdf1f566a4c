"""The gRPC server every service runs: asyncio, health, reflection, and one generic handler in front of every method
(dispatcher.py) for authentication (auth.py: bearer tokens -> tenant), request ids (context.py), error mapping
(status.py: project errors -> google.rpc.Status with details), Prometheus metrics (metrics.py), deadlines, rate and
message limits (limits.py) and TLS (tls.py); create_server and graceful shutdown here."""
from __future__ import annotations

import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import REGISTRY, CollectorRegistry

from services.common.server.auth import Authenticator, TokenLookups, TtlCache, bearer_token
from services.common.server.context import (AppContext, Registrar, build_app_context, current_request_id,
                                            current_tenant, current_token)
from services.common.server.dispatcher import PUBLIC_PREFIXES, Dispatcher, Undecodable, generic_methods_only
from services.common.server.limits import Deadlines, RequestLimits, TokenBuckets, check_request_content
from services.common.server.metrics import RpcMetrics, metrics_of
from services.common.server.status import DOMAIN, to_status
from services.common.server.tls import server_credentials

__all__ = ["AppContext", "Authenticator", "DOMAIN", "Deadlines", "Dispatcher", "PUBLIC_PREFIXES", "Registrar",
           "RequestLimits", "RpcMetrics", "TokenBuckets", "TokenLookups", "TtlCache", "Undecodable", "bearer_token",
           "build_app_context", "check_request_content", "create_server", "current_request_id", "current_tenant",
           "current_token", "generic_methods_only", "metrics_of", "server_credentials", "shutdown", "to_status"]

log = logging.getLogger(__name__)


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
