"""`praxon jobs|models|selftest`: follow jobs, read the model registry, run the platform self-test. Every command
is a client of the public gRPC API."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported where used, so that `praxon --help` loads no grpc)
    from services.common.client import Target


def cmd_jobs(args) -> None:
    from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
    from services.common.client import resolve_target, state_name, watch

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
        from google.protobuf import json_format

        job = stub.GetJob(jobs_pb2.GetJobRequest(job_id=args.job_id), metadata=target.metadata).job
        print(json_format.MessageToJson(job))


def cmd_models(args) -> None:
    from praxon.models.v1 import models_pb2, models_pb2_grpc
    from services.common.client import resolve_target

    target = resolve_target(args.address, args.token, args.data_dir)
    stub = models_pb2_grpc.ModelRegistryServiceStub(target.channel())
    if args.action == "alias":
        if not args.name or args.version is None or not args.alias:
            raise SystemExit("usage: praxon models alias NAME VERSION ALIAS")
        v = stub.SetAlias(models_pb2.SetAliasRequest(name=args.name, alias=args.alias, version=args.version),
                          metadata=target.metadata).version
        print(f"alias {args.alias} -> {v.name} v{v.version}  (aliases of v{v.version}: {','.join(v.aliases) or '-'})")
        return
    if args.version is not None or args.alias:
        raise SystemExit("usage: praxon models list [NAME]")
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
    from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
    from services.common.client import new_idempotency_key, resolve_target, state_name, wait_for_success

    target = resolve_target(args.address, args.token, args.data_dir)
    stub = jobs_pb2_grpc.JobServiceStub(target.channel())
    job = stub.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=args.steps, step_seconds=args.step_seconds,
                                                                 idempotency_key=new_idempotency_key()),
                                metadata=target.metadata).job
    print(f"started self-test job {job.id}")
    job = wait_for_success(target, job, "self-test")
    print(f"self-test {state_name(job.state)}: result={dict(job.result)}")


def demo(target: Target) -> None:
    """`praxon demo` step: the self-test job through the public API, then the registry."""
    from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
    from praxon.models.v1 import models_pb2, models_pb2_grpc
    from services.common.client import new_idempotency_key, wait_for_success

    stub = jobs_pb2_grpc.JobServiceStub(target.channel())
    job = stub.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=10, step_seconds=0.2,
                                                                 idempotency_key=new_idempotency_key()),
                                metadata=target.metadata).job
    print(f"submitted job {job.id} ({job.kind}); watching its events:")
    job = wait_for_success(target, job, "self-test")
    print(f"result: digest {job.result['digest'][:16]}..., artifacts: "
          f"{[a.name + ' sha256=' + a.sha256[:12] for a in job.artifacts]}, models: "
          f"{[m.name + ' v' + str(m.version) for m in job.models]}")
    models = models_pb2_grpc.ModelRegistryServiceStub(target.channel())
    for m in models.ListModels(models_pb2.ListModelsRequest(), metadata=target.metadata).models:
        print(f"registry: {m.name} latest v{m.latest.version} ({m.latest.kind})")


def add_commands(sub, client_opts) -> None:
    sp = sub.add_parser("jobs", help="list, watch, cancel jobs")
    client_opts(sp)
    jsub = sp.add_subparsers(dest="action", required=True)
    jp = jsub.add_parser("list")
    jp.add_argument("--limit", type=int, default=20)
    jp.add_argument("--kind")
    for action in ("watch", "cancel", "get"):
        jsub.add_parser(action).add_argument("job_id")
    sp.set_defaults(func=cmd_jobs)

    sp = sub.add_parser("models", help="list models or the versions of one; point an alias at a version",
                        description="praxon models list [NAME] | praxon models alias NAME VERSION ALIAS "
                                    "(e.g. promote: praxon models alias guard 3 production)")
    client_opts(sp)
    sp.add_argument("action", choices=["list", "alias"])
    sp.add_argument("name", nargs="?", help="model name")
    sp.add_argument("version", nargs="?", type=int, help="alias: the version number to point at")
    sp.add_argument("alias", nargs="?", help="alias: its name, e.g. production")
    sp.set_defaults(func=cmd_models)

    sp = sub.add_parser("selftest", help="run the platform self-test job and watch it")
    client_opts(sp)
    sp.add_argument("--steps", type=int, default=10)
    sp.add_argument("--step-seconds", type=float, default=0.2)
    sp.set_defaults(func=cmd_selftest)
