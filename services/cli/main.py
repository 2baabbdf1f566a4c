"""The `praxon` command: run the platform (up, serve, worker, migrate), manage tokens, follow jobs and models."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
from pathlib import Path

from services.cli.client import resolve_target, state_name, watch
from services.common.jobkinds import QUEUES


def _settings():
    from services.common.settings import Settings  # noqa: PLC0415 - parse config only when a command runs

    return Settings()


def cmd_serve(args) -> None:
    from services.cli.serve import SERVICES, serve  # noqa: PLC0415

    settings = _settings()
    if args.port is not None:
        settings.grpc.port = args.port
    asyncio.run(serve(settings, args.services or list(SERVICES)))


def cmd_predictor(args) -> None:
    from services.cli.serve import run_predictor  # noqa: PLC0415

    run_predictor(_settings(), args.name, args.tenant, args.model, args.http_port, args.grpc_port)


def cmd_worker(args) -> None:
    from workers.app import start_worker  # noqa: PLC0415

    queues = list(QUEUES) if args.queues in (None, "all") else args.queues.split(",")
    unknown = sorted(set(queues) - set(QUEUES))
    if unknown:
        raise SystemExit(f"unknown queue(s) {', '.join(unknown)}; known: {', '.join(QUEUES)}")
    start_worker(_settings(), queues, concurrency=args.concurrency, pool=args.pool)


def cmd_migrate(args) -> None:  # noqa: ARG001
    from services.common import db  # noqa: PLC0415

    settings = _settings()
    db.ensure_database(settings)
    applied = db.migrate(settings)
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")


def cmd_token_create(args) -> None:
    from services.common import db  # noqa: PLC0415

    settings = _settings()
    with db.connect(settings) as conn:
        tenant_id, token = db.create_token(conn, args.tenant, args.name)
    print(json.dumps({"tenant": args.tenant, "tenant_id": tenant_id, "token": token}))


def cmd_up(args) -> None:
    from services.cli.up import run_up  # noqa: PLC0415

    run_up(Path(args.data_dir), port=args.port, s3_port_base=args.s3_port_base)


def cmd_demo(args) -> None:
    from services.cli.demo import run_demo  # noqa: PLC0415

    run_demo(Path(args.data_dir), port=args.port)


def cmd_jobs(args) -> None:
    from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc  # noqa: PLC0415

    target = resolve_target(args.address, args.token, args.data_dir)
    stub = jobs_pb2_grpc.JobServiceStub(target.channel())
    if args.action == "list":
        resp = stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=args.limit, kind=args.kind or ""),
                             metadata=target.metadata)
        for j in resp.jobs:
            print(f"{j.id}  {j.kind:28} {state_name(j.state):9} {j.progress * 100:5.1f}%  {j.message}")
    elif args.action == "watch":
        job = watch(target, args.job_id)
        print(f"{job.id} {state_name(job.state)} {job.error.reason + ': ' + job.error.message if job.error.reason else ''}")
    elif args.action == "cancel":
        job = stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=args.job_id), metadata=target.metadata).job
        print(f"{job.id} {state_name(job.state)} cancel_requested={job.cancel_requested}")
    elif args.action == "get":
        from google.protobuf import json_format  # noqa: PLC0415

        job = stub.GetJob(jobs_pb2.GetJobRequest(job_id=args.job_id), metadata=target.metadata).job
        print(json_format.MessageToJson(job))


def cmd_models(args) -> None:
    from praxon.models.v1 import models_pb2, models_pb2_grpc  # noqa: PLC0415

    target = resolve_target(args.address, args.token, args.data_dir)
    stub = models_pb2_grpc.ModelRegistryServiceStub(target.channel())
    if args.name:
        resp = stub.ListModelVersions(models_pb2.ListModelVersionsRequest(name=args.name), metadata=target.metadata)
        for v in resp.versions:
            metrics = " ".join(f"{k}={x:.4g}" for k, x in sorted(v.metrics.items()))
            print(f"{v.name} v{v.version}  {v.kind:24} aliases={','.join(v.aliases) or '-'}  {metrics}")
    else:
        for m in stub.ListModels(models_pb2.ListModelsRequest(), metadata=target.metadata).models:
            aliases = ",".join(f"{a}->v{n}" for a, n in sorted(m.aliases.items())) or "-"
            print(f"{m.name:32} latest v{m.latest.version}  {m.latest.kind:24} aliases={aliases}")


def cmd_selftest(args) -> None:
    from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc  # noqa: PLC0415

    target = resolve_target(args.address, args.token, args.data_dir)
    stub = jobs_pb2_grpc.JobServiceStub(target.channel())
    job = stub.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=args.steps, step_seconds=args.step_seconds),
                                metadata=target.metadata).job
    print(f"started self-test job {job.id}")
    job = watch(target, job.id)
    print(f"self-test {state_name(job.state)}: result={dict(job.result)}")
    if state_name(job.state) != "SUCCEEDED":
        raise SystemExit(1)


# Each service adds its commands from its own module: add_commands(subparsers, client_opts).
SERVICE_CLIS: list[str] = [
    "services.moderation.cli",
    "services.unlearning.cli",
    "services.recommendation.cli",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="praxon", description=__doc__)
    p.add_argument("--log-level", default=os.environ.get("PRAXON_LOG_LEVEL", "WARNING"))
    sub = p.add_subparsers(dest="command", required=True)

    def client_opts(sp):
        sp.add_argument("--address", help="host:port of the platform service (env PRAXON_ADDRESS)")
        sp.add_argument("--token", help="API token (env PRAXON_TOKEN)")
        sp.add_argument("--data-dir", default=".praxon", help="where `praxon up` keeps its state")

    sp = sub.add_parser("up", help="run the whole platform on embedded defaults (Ctrl-C stops everything)")
    sp.add_argument("--data-dir", default=".praxon")
    sp.add_argument("--port", type=int, default=50051)
    sp.add_argument("--s3-port-base", type=int, default=28300, help="first of the ports `weed mini` uses")
    sp.set_defaults(func=cmd_up)

    sp = sub.add_parser("demo", help="start the platform on embedded defaults, run the end-to-end demo, stop")
    sp.add_argument("--data-dir", default=".praxon")
    sp.add_argument("--port", type=int, default=50051)
    sp.set_defaults(func=cmd_demo)

    sp = sub.add_parser("serve", help="serve gRPC services (settings from PRAXON_* env vars)")
    sp.add_argument("services", nargs="*", help="services to host (default: all)")
    sp.add_argument("--port", type=int)
    sp.set_defaults(func=cmd_serve)

    sp = sub.add_parser("predictor", help="serve a registered model with kserve's ModelServer (OIP v2)")
    sp.add_argument("name", help="predictor name, e.g. recommendation")
    sp.add_argument("--tenant", required=True, help="tenant id that owns the model")
    sp.add_argument("--model", required=True, help="model name, name:version or name@alias in the registry")
    sp.add_argument("--http-port", type=int, default=8080)
    sp.add_argument("--grpc-port", type=int, default=8081)
    sp.set_defaults(func=cmd_predictor)

    sp = sub.add_parser("worker", help="run a Celery worker for job queues")
    sp.add_argument("--queues", default="all", help=f"comma-separated subset of {','.join(QUEUES)} (default all)")
    sp.add_argument("--concurrency", type=int, default=1)
    sp.add_argument("--pool", default="prefork", choices=["prefork", "solo", "threads"])
    sp.set_defaults(func=cmd_worker)

    sp = sub.add_parser("migrate", help="apply database migrations")
    sp.set_defaults(func=cmd_migrate)

    sp = sub.add_parser("token", help="API tokens")
    tsub = sp.add_subparsers(dest="action", required=True)
    tp = tsub.add_parser("create", help="create a token for a tenant (created if new); prints it once")
    tp.add_argument("--tenant", required=True)
    tp.add_argument("--name", default="")
    tp.set_defaults(func=cmd_token_create)

    sp = sub.add_parser("jobs", help="list, watch, cancel jobs")
    client_opts(sp)
    jsub = sp.add_subparsers(dest="action", required=True)
    jp = jsub.add_parser("list")
    jp.add_argument("--limit", type=int, default=20)
    jp.add_argument("--kind")
    for action in ("watch", "cancel", "get"):
        jsub.add_parser(action).add_argument("job_id")
    sp.set_defaults(func=cmd_jobs)

    sp = sub.add_parser("models", help="list models, or the versions of one")
    client_opts(sp)
    sp.add_argument("action", choices=["list"])
    sp.add_argument("name", nargs="?")
    sp.set_defaults(func=cmd_models)

    sp = sub.add_parser("selftest", help="run the platform self-test job and watch it")
    client_opts(sp)
    sp.add_argument("--steps", type=int, default=10)
    sp.add_argument("--step-seconds", type=float, default=0.2)
    sp.set_defaults(func=cmd_selftest)

    import importlib  # noqa: PLC0415

    for module in SERVICE_CLIS:
        importlib.import_module(module).add_commands(sub, client_opts)
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        args.func(args)
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # noqa: BLE001 - a CLI prints gRPC errors plainly
        import grpc  # noqa: PLC0415

        if isinstance(exc, grpc.RpcError):
            raise SystemExit(f"error: {exc.code().name}: {exc.details()}") from None
        raise


if __name__ == "__main__":
    main()
