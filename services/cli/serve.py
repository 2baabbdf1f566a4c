"""Which services a process can host, and the serve loop (gRPC server + graceful shutdown)."""
from __future__ import annotations

import asyncio
import logging
import signal

from prometheus_client import start_http_server

from services import catalog
from services.common import db
from services.common.server import AppContext, build_app_context, create_server, shutdown
from services.common.settings import Settings
from services.common.spec import resolve

log = logging.getLogger(__name__)


def registrars(names: list[str]):
    """The register(server, app) functions of the named services (their specs' `servicers`)."""
    known = catalog.names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown service(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [resolve(catalog.get(n).servicers) for n in names]


async def serve(settings: Settings, names: list[str], *, stop_event: asyncio.Event | None = None,
                app: AppContext | None = None) -> None:
    db.ensure_database(settings)
    db.migrate(settings)
    app = app or build_app_context(settings)
    app.store.ensure_bucket()
    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr=settings.grpc.host)
    server, port = await create_server(app, registrars(names))
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


def run_predictor(settings: Settings, name: str, tenant_id: str, model: str, http_port: int, grpc_port: int) -> None:
    """Serve one registered model with kserve's ModelServer (Open Inference Protocol v2 over REST and gRPC)."""
    predictors = catalog.predictors()
    if name not in predictors:
        raise SystemExit(f"unknown predictor {name!r}; known: {', '.join(predictors) or 'none yet'}")
    from kserve import ModelServer  # heavy; only predictor processes need it

    predictor = resolve(predictors[name])(settings, tenant_id, model)
    if not predictor.ready:  # ModelServer.start() refuses models that are not loaded yet
        predictor.load()
    ModelServer(http_port=http_port, grpc_port=grpc_port).start([predictor])
