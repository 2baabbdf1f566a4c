"""The demo's steps, each a real client of the public API. Services add their own step here."""
from __future__ import annotations

from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from services.cli.client import Target, state_name, watch


def selftest(target: Target) -> None:
    stub = jobs_pb2_grpc.JobServiceStub(target.channel())
    job = stub.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=10, step_seconds=0.2),
                                metadata=target.metadata).job
    print(f"submitted job {job.id} ({job.kind}); watching its events:")
    job = watch(target, job.id)
    if state_name(job.state) != "SUCCEEDED":
        raise SystemExit(f"self-test ended {state_name(job.state)}: {job.error.message}")
    print(f"result: digest {job.result['digest'][:16]}..., artifacts: "
          f"{[a.name + ' sha256=' + a.sha256[:12] for a in job.artifacts]}, models: "
          f"{[m.name + ' v' + str(m.version) for m in job.models]}")
    models = models_pb2_grpc.ModelRegistryServiceStub(target.channel())
    for m in models.ListModels(models_pb2.ListModelsRequest(), metadata=target.metadata).models:
        print(f"registry: {m.name} latest v{m.latest.version} ({m.latest.kind})")


def moderation(target: Target) -> None:
    from services.moderation.cli import demo  # noqa: PLC0415

    demo(target)


def recommendation(target: Target) -> None:
    from services.recommendation.cli import demo  # noqa: PLC0415

    demo(target)


def unlearning(target: Target) -> None:
    from services.unlearning.cli import demo  # noqa: PLC0415

    demo(target)


STEPS = [("job system: a self-test job through the public API", selftest),
         ("moderation: train the guard on the seed set, promote it, moderate texts with per-topic severities",
          moderation),
         ("unlearning: train a certified guard head, forget records, audit the certificate, show the lineage",
          unlearning),
         ("recommendation: import MovieLens-100k, train PreferDiff (demo-sized), recommend for a new history",
          recommendation)]
