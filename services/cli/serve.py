"""Which services a process can host, and the serve loop (gRPC server + graceful shutdown)."""
from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Callable

from prometheus_client import start_http_server

from services import catalog
from services.common import db
from services.common.server import AppContext, build_app_context, create_server, shutdown
from services.common.settings import Settings, apply_torch_threads
from services.common.spec import resolve

log = logging.getLogger(__name__)


def registrars(names: list[str]):
    """The register(server, app) functions of the named services (their specs' `servicers`)."""
    known = catalog.names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown service(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [resolve(catalog.get(n).servicers) for n in names]


def check_port_free(host: str, port: int, what: str) -> None:
    """Exit with one line naming the port when a fixed port (not 0) cannot be bound on host."""
    from services.common.embedded import port_is_free

    if port and not port_is_free(port, host):
        raise SystemExit(f"error: cannot listen on {host}:{port} ({what}): the port is in use by another program")


async def serve(settings: Settings, names: list[str], *, stop_event: asyncio.Event | None = None,
                app: AppContext | None = None, on_serving: Callable[[int], None] | None = None) -> None:
    """Host the named services until stop_event (or SIGTERM/SIGINT); on_serving(port) once the gRPC server listens
    (settings.grpc.port 0: a port the kernel picks). A port that is taken is said as such, before anything
    starts."""
    check_port_free(settings.grpc.host, settings.grpc.port, "gRPC, PRAXON_GRPC__PORT / --port")
    check_port_free(settings.grpc.host, settings.metrics_port, "metrics, PRAXON_METRICS_PORT")
    apply_torch_threads(settings)
    db.ensure_database(settings)
    db.migrate(settings)
    app = app or build_app_context(settings)
    app.store.ensure_bucket()
    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr=settings.grpc.host)
    try:
        server, port = await create_server(app, registrars(names))
    except RuntimeError as exc:  # grpc: "Failed to bind to address ..." (taken since the check above)
        if "bind" not in str(exc).lower():
            raise
        raise SystemExit(f"error: cannot listen on {settings.grpc.host}:{settings.grpc.port} (gRPC): "
                         "the port is in use by another program") from None
    if on_serving is not None:
        on_serving(port)
    # What exists now (modules, descriptors, the app) lives as long as the process: moved out of the collector's
    # generations, full collections stop traversing it. A server hosting one service spent 7% of a trivial call's
    # instructions more without this (benchmarks/platform/grpc_instructions.py and its RESULTS).
    gc.freeze()
    print(f"praxon: serving {', '.join(names)} on {settings.grpc.host}:{port}", flush=True)
    stop_event = stop_event or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_event.set)
    await stop_event.wait()
    log.info("shutting down (grace %.1fs)", settings.grpc.grace_seconds)
    await shutdown(server, settings.grpc.grace_seconds)
    hub = app.extras.get("event_hub")
    if hub is not None:
        await hub.stop()
    app.pool.close()


def resolve_tenant(settings: Settings, text: str) -> str:
    """A tenant id or name -> the tenant's id; an unknown one -> a one-line error and exit status 2 (a usage
    error, as argparse gives), never a database traceback."""
    import sys
    import uuid

    try:
        as_id = str(uuid.UUID(text))
    except ValueError:
        as_id = None
    with db.connect(settings) as conn:
        row = conn.execute("SELECT id FROM tenants WHERE id = %s::uuid", (as_id,)).fetchone() if as_id else None
        row = row or conn.execute("SELECT id FROM tenants WHERE name = %s", (text,)).fetchone()
    if row is None:
        print(f"error: --tenant: no tenant has the id or name {text!r}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    return str(row["id"])


def predictor_defaults(host: str | None, require_token: bool | None, *, cluster: bool) -> tuple[str, bool]:
    """The listening host and whether a token is required, where not given: outside a cluster loopback and a
    token (nothing stands between the port and whoever can reach it); inside one (KUBERNETES_SERVICE_HOST set)
    0.0.0.0, which KServe's Service / activator need to reach the pod on its IP, and no token: there the mesh or a
    NetworkPolicy guards the predictor and KServe's callers do not carry praxon tokens (helm/praxon/README.md,
    KServe predictors)."""
    host = host or ("0.0.0.0" if cluster else "127.0.0.1")
    return host, (not cluster) if require_token is None else require_token


def run_predictor(settings: Settings, name: str, tenant: str, model: str, http_port: int, grpc_port: int, *,
                  host: str | None = None, require_token: bool | None = None) -> None:
    """Serve one registered model with kserve's ModelServer (Open Inference Protocol v2 over REST and gRPC) on
    `host`, for the tenant given by id or name; unset host / require_token: predictor_defaults()."""
    from services.common import oip

    predictors = catalog.predictors()
    if name not in predictors:
        raise SystemExit(f"unknown predictor {name!r}; known: {', '.join(predictors) or 'none yet'}")
    host, require_token = predictor_defaults(host, require_token, cluster=oip.in_cluster())
    apply_torch_threads(settings)
    tenant_id = resolve_tenant(settings, tenant)
    predictor = resolve(predictors[name])(settings, tenant_id, model)
    if not predictor.ready:  # ModelServer.start() refuses models that are not loaded yet
        predictor.load()
    tokens = None
    if require_token:
        g = settings.grpc
        tokens = oip.TenantTokens(db.create_pool(settings, max_size=2), tenant_id, g.auth_cache_seconds,
                                  g.auth_negative_cache_seconds)
    print(f"praxon: predictor {name} ({model}) of tenant {tenant_id} on {host}: HTTP {http_port}, gRPC "
          f"{grpc_port}; {'token required' if tokens else 'no token required'}", flush=True)
    oip.predictor_server(host, http_port, grpc_port, tokens).start([predictor])
