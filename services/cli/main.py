"""The `praxon` command: run the platform (up, serve, worker, migrate, predictor), manage tokens; every service
adds its own commands (its spec's `cli` module, see services/catalog.py)."""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import logging
import os
from pathlib import Path

from services import catalog


def _settings(data_dir: str | None = None):
    """The process's Settings (parsed only when a command runs). With a data dir: when PRAXON_DATABASE_URL is not
    set and `praxon up` runs there, its embedded PostgreSQL (not the 127.0.0.1:5432 default)."""
    from services.common.client import resolve_database_url

    url = resolve_database_url(data_dir) if data_dir else None
    return catalog.settings(**({"database_url": url} if url else {}))


def cmd_serve(args) -> None:
    import asyncio

    from services.cli.serve import serve

    settings = _settings()
    if args.port is not None:
        settings.grpc.port = args.port
    asyncio.run(serve(settings, args.services or catalog.names()))


def cmd_predictor(args) -> None:
    from services.cli.serve import run_predictor

    run_predictor(_settings(), args.name, args.tenant, args.model, args.http_port, args.grpc_port, host=args.host,
                  require_token=args.require_token)


def cmd_worker(args) -> None:
    from workers.app import start_worker

    settings = _settings()
    known = catalog.queues()
    queues = list(known) if args.queues in (None, "all") else args.queues.split(",")
    unknown = sorted(set(queues) - set(known))
    if unknown:
        raise SystemExit(f"unknown queue(s) {', '.join(unknown)}; known: {', '.join(known)}")
    start_worker(settings, queues, concurrency=args.concurrency, pool=args.pool)


def cmd_migrate(args) -> None:
    from services.common import db

    settings = _settings(args.data_dir)
    db.ensure_database(settings)
    applied = db.migrate(settings)
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")


def _ttl(args) -> float | None:
    return None if not args.ttl_days else args.ttl_days * 86400.0


def cmd_token_create(args) -> None:
    from services.common import db

    settings = _settings(args.data_dir)
    with db.connect(settings) as conn:
        tenant_id, token = db.create_token(conn, args.tenant, args.name, ttl_seconds=_ttl(args))
    print(json.dumps({"tenant": args.tenant, "tenant_id": tenant_id, "token": token}))


def cmd_token_list(args) -> None:
    from services.common import db

    with db.connect(_settings(args.data_dir)) as conn:
        rows = db.list_tokens(conn, args.tenant)
    for r in rows:
        def when(t):
            return t.isoformat(timespec="seconds") if t else "-"
        expired = r["expires_at"] is not None and r["expires_at"] <= datetime.datetime.now(datetime.timezone.utc)
        state = "revoked" if r["revoked_at"] else "expired" if expired else "live"
        print(f"{r['id']}  {r['name'] or '-':20} {state:8} created={when(r['created_at'])} "
              f"expires={when(r['expires_at'])} last_used={when(r['last_used_at'])}")


def cmd_token_revoke(args) -> None:
    from services.common import db

    if (args.id is None) == (args.name is None):
        raise SystemExit("error: give --id or --name")
    with db.connect(_settings(args.data_dir)) as conn:
        n = db.revoke_tokens(conn, args.tenant, token_id=args.id, token_name=args.name)
    print(f"revoked {n} token(s); servers stop accepting them within their auth cache period")


def cmd_token_rotate(args) -> None:
    from services.common import db

    with db.connect(_settings(args.data_dir)) as conn:
        tenant_id, token, revoked = db.rotate_token(conn, args.tenant, args.name, ttl_seconds=_ttl(args))
    print(json.dumps({"tenant": args.tenant, "tenant_id": tenant_id, "token": token, "revoked": revoked}))


def cmd_up(args) -> None:
    from services.cli.up import run_up

    run_up(Path(args.data_dir), port=args.port, s3_port_base=args.s3_port_base, console_port=args.console_port,
           console=args.console)


def cmd_console(args) -> None:
    from services.common.client import DEFAULT_ADDRESS, find_up_state
    from services.console.server import run_console

    address = args.address or os.environ.get("PRAXON_ADDRESS") or find_up_state(args.data_dir)[0].get("address") \
        or DEFAULT_ADDRESS
    services = {}
    for item in args.service_address:
        name, _, where = item.partition("=")
        if not name or not where:
            raise SystemExit(f"error: --service-address {item!r}: expected NAME=HOST:PORT")
        services[name] = where
    run_console(address, args.host, args.port, service_addresses=services, secure_cookies=args.secure_cookies)


def cmd_demo(args) -> None:
    from services.cli.demo import run_demo

    run_demo(Path(args.data_dir), port=args.port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="praxon", description=__doc__)
    p.add_argument("--log-level", default=os.environ.get("PRAXON_LOG_LEVEL", "WARNING"))
    sub = p.add_subparsers(dest="command", required=True)

    def client_opts(sp, default=None):
        sp.add_argument("--address", default=default, help="host:port of the platform service (env PRAXON_ADDRESS)")
        sp.add_argument("--token", default=default, help="API token (env PRAXON_TOKEN)")
        sp.add_argument("--data-dir", default=default or ".praxon", help="where `praxon up` keeps its state")
        sp.praxon_client_opts = True

    sp = sub.add_parser("up", help="run the whole platform on embedded defaults (Ctrl-C stops everything)")
    sp.add_argument("--data-dir", default=".praxon")
    sp.add_argument("--port", type=int, default=0, help="gRPC port on 127.0.0.1 (default: a free one, printed on "
                    "start and recorded in DATA_DIR/up.json, where every client command finds it)")
    sp.add_argument("--s3-port-base", type=int, default=0,
                    help="first of the 6 ports `weed mini` uses (it also takes each +10000); default: a free block "
                    "below the ephemeral range")
    sp.add_argument("--console-port", type=int, default=0, help="port of the web console on 127.0.0.1 (default: "
                    "a free one, printed on start and recorded in DATA_DIR/up.json as console_url)")
    sp.add_argument("--console", action=argparse.BooleanOptionalAction, default=True,
                    help="start the web console (`praxon console`) with the platform (default: yes)")
    sp.set_defaults(func=cmd_up)

    sp = sub.add_parser("demo", help="start the platform on embedded defaults, run the end-to-end demo, stop")
    sp.add_argument("--data-dir", default=".praxon")
    sp.add_argument("--port", type=int, default=0, help="gRPC port (default: a free one)")
    sp.set_defaults(func=cmd_demo)

    sp = sub.add_parser("console", help="serve the read-only web console (sign in with an API token)")
    sp.add_argument("--address", help="host:port of the platform's gRPC API (default: PRAXON_ADDRESS, else the "
                    "`praxon up` running in --data-dir, else 127.0.0.1:50051)")
    sp.add_argument("--service-address", action="append", default=[], metavar="NAME=HOST:PORT",
                    help="a service served at another address than --address (unlearning, design), as in a cluster "
                    "where each service has its own; repeatable")
    sp.add_argument("--data-dir", default=".praxon", help="where `praxon up` keeps its state")
    sp.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback only)")
    sp.add_argument("--port", type=int, default=8600, help="port to listen on (0: a free one, printed on start)")
    sp.add_argument("--secure-cookies", action="store_true", help="mark the session cookie Secure (the console "
                    "is reached over HTTPS, through a TLS proxy)")
    sp.set_defaults(func=cmd_console)

    sp = sub.add_parser("serve", help="serve gRPC services (settings from PRAXON_* env vars)")
    sp.add_argument("services", nargs="*", help="services to host (default: all)")
    sp.add_argument("--port", type=int)
    sp.set_defaults(func=cmd_serve)

    sp = sub.add_parser("predictor", help="serve a registered model with kserve's ModelServer (OIP v2)")
    sp.add_argument("name", help="predictor name, e.g. recommendation")
    sp.add_argument("--tenant", required=True, help="id or name of the tenant that owns the model")
    sp.add_argument("--model", required=True, help="model name, name:version or name@alias in the registry")
    sp.add_argument("--http-port", type=int, default=8080)
    sp.add_argument("--grpc-port", type=int, default=8081)
    sp.add_argument("--host", help="address both servers listen on (default: 127.0.0.1; in a Kubernetes pod, "
                    "0.0.0.0)")
    sp.add_argument("--require-token", action=argparse.BooleanOptionalAction, default=None,
                    help="answer only requests with 'Authorization: Bearer <API token of the tenant>' (health, "
                    "readiness and metrics excepted); default: on, off in a Kubernetes pod (the mesh or a "
                    "NetworkPolicy guards it there)")
    sp.set_defaults(func=cmd_predictor)

    sp = sub.add_parser("worker", help="run a Celery worker for job queues")
    sp.add_argument("--queues", default="all", help=f"comma-separated subset of {','.join(catalog.queues())} (default all)")
    sp.add_argument("--concurrency", type=int, default=1)
    sp.add_argument("--pool", default="prefork", choices=["prefork", "solo", "threads"])
    sp.set_defaults(func=cmd_worker)

    sp = sub.add_parser("migrate", help="apply database migrations")
    sp.add_argument("--data-dir", default=".praxon", help="use the database of `praxon up` running there "
                    "(unless PRAXON_DATABASE_URL is set)")
    sp.set_defaults(func=cmd_migrate)

    sp = sub.add_parser("token", help="API tokens")
    tsub = sp.add_subparsers(dest="action", required=True)
    for action, func, help_text in (
            ("create", cmd_token_create, "create a token for a tenant (created if new); prints it once"),
            ("list", cmd_token_list, "a tenant's tokens: name, state, created, expires, last used (no secrets)"),
            ("revoke", cmd_token_revoke, "revoke a token by --id, or every live token with --name"),
            ("rotate", cmd_token_rotate, "a new token under --name; the older ones of that name are revoked")):
        tp = tsub.add_parser(action, help=help_text)
        tp.add_argument("--tenant", required=True)
        tp.add_argument("--name", default="" if action == "create" else None, required=action == "rotate")
        if action in ("create", "rotate"):
            tp.add_argument("--ttl-days", type=float, default=0, help="expire after this many days (0: never)")
        if action == "revoke":
            tp.add_argument("--id", help="the token's id (from `praxon token list`)")
        tp.add_argument("--data-dir", default=".praxon", help="use the database of `praxon up` running there "
                        "(unless PRAXON_DATABASE_URL is set)")
        tp.set_defaults(func=func)

    for spec in catalog.SPECS:
        if spec.cli:
            importlib.import_module(spec.cli).add_commands(sub, client_opts)
    _share_client_opts(p, client_opts)
    return p


def _share_client_opts(parser: argparse.ArgumentParser, client_opts, inherited: bool = False) -> None:
    """--address, --token and --data-dir go after the whole command, for every command: a group that takes them
    (`praxon jobs`) passes them down to its subcommands (`praxon jobs list --address ...`), where they default to
    nothing, so a value given before the subcommand is kept."""
    mine = inherited or getattr(parser, "praxon_client_opts", False)
    for action in parser._actions:  # (argparse keeps its subcommands here; there is no public accessor)
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                if mine and not getattr(child, "praxon_client_opts", False):
                    client_opts(child, default=argparse.SUPPRESS)
                _share_client_opts(child, client_opts, mine)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        args.func(args)
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # a CLI prints one line per error; the traceback only when debugging
        if str(args.log_level).upper() == "DEBUG":
            logging.getLogger("praxon").exception("the command failed")
        raise SystemExit(f"error: {describe_error(exc)}") from None


def describe_error(exc: BaseException) -> str:
    """One line for an error a command could not handle: a gRPC status with its details and field violations, an
    OS error with the path, the project's own errors with their reason, else the exception's type and message."""
    import grpc

    from services.common.errors import PraxonError

    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        from services.common.client import error_line, unreachable_hint

        return error_line(exc) + unreachable_hint(exc)
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    if isinstance(exc, PraxonError):
        return f"{exc.reason}: {exc.message}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else '(no message)'}"


if __name__ == "__main__":
    main()
