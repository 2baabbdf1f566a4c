"""A tenant never sees another's jobs, models or artifacts: NOT_FOUND, so existence does not leak."""
from __future__ import annotations

import grpc
import pytest

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.common.v1 import common_pb2
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from tests.harness import auth, rpc_error_details


@pytest.fixture
def stubs(platform):
    ch = grpc.insecure_channel(platform.address)
    return (jobs_pb2_grpc.JobServiceStub(ch), models_pb2_grpc.ModelRegistryServiceStub(ch),
            artifacts_pb2_grpc.ArtifactServiceStub(ch))


def expect(code, fn):
    with pytest.raises(grpc.RpcError) as err:
        fn()
    assert err.value.code() == code, err.value.details()
    return err.value


def test_other_tenant_gets_not_found(stubs, tenants, settings, platform):
    jobs, models, artifacts = stubs
    a, b = auth(tenants["a"][1]), auth(tenants["b"][1])
    job = jobs.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=1), metadata=a).job
    art = artifacts.UploadArtifact(iter([artifacts_pb2.UploadArtifactRequest(name="a.txt", chunk=b"secret-a")]),
                                   metadata=a).artifact
    # a model of tenant A, registered the way a job does
    from services.common import db
    from services.common.registry import Registry
    import torch
    reg = platform.app.registry
    with db.connect(settings) as conn:
        conn.execute("UPDATE jobs SET state = 'RUNNING' WHERE id = %s", (job.id,))
        reg.stage_model(conn, tenants["a"][0], job.id, "private-model", {"w": torch.ones(2)}, kind="t", config={},
                        metrics={}, dataset_artifact_id=None, parent_version_ids=[])
        Registry.commit_job_outputs(conn, job.id)
    ref = common_pb2.ModelRef(name="private-model", version=1)
    assert models.GetModelVersion(models_pb2.GetModelVersionRequest(model=ref), metadata=a).version.version == 1

    nf = grpc.StatusCode.NOT_FOUND
    expect(nf, lambda: jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job.id), metadata=b))
    expect(nf, lambda: jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.id), metadata=b))
    expect(nf, lambda: list(jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job.id), metadata=b)))
    assert job.id not in {j.id for j in jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=500), metadata=b).jobs}
    expect(nf, lambda: models.GetModelVersion(models_pb2.GetModelVersionRequest(model=ref), metadata=b))
    expect(nf, lambda: models.GetLineage(models_pb2.GetLineageRequest(model=ref), metadata=b))
    expect(nf, lambda: models.SetAlias(models_pb2.SetAliasRequest(name="private-model", alias="production",
                                                                  version=1), metadata=b))
    assert "private-model" not in {m.name for m in models.ListModels(models_pb2.ListModelsRequest(), metadata=b).models}
    expect(nf, lambda: artifacts.GetArtifact(artifacts_pb2.GetArtifactRequest(artifact_id=art.id), metadata=b))
    # and the owner still sees all of it
    assert artifacts.GetArtifact(artifacts_pb2.GetArtifactRequest(artifact_id=art.id), metadata=a).artifact.sha256


@pytest.mark.parametrize("metadata", [[], [("authorization", "Bearer nope")], [("authorization", "Basic abc")]])
def test_missing_or_bad_token_is_unauthenticated(stubs, metadata):
    jobs, _, _ = stubs
    err = expect(grpc.StatusCode.UNAUTHENTICATED, lambda: jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=metadata))
    _, info, _, _ = rpc_error_details(err)
    assert info.reason in ("MISSING_TOKEN", "INVALID_TOKEN") and info.domain == "praxon.dev"


def test_health_needs_no_token(platform):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(platform.address))
    assert stub.Check(health_pb2.HealthCheckRequest(service="praxon.jobs.v1.JobService")).status == \
        health_pb2.HealthCheckResponse.SERVING


def test_private_artifacts_are_not_downloadable(stubs, tenants, settings, platform):
    _, _, artifacts = stubs
    from services.common import db
    with db.connect(settings) as conn:
        row = platform.app.registry.put_artifact(conn, tenants["a"][0], "state.safetensors", b"pre-noise weights",
                                                 "application/octet-stream", metadata={"visibility": "private"})
    expect(grpc.StatusCode.NOT_FOUND, lambda: artifacts.GetArtifact(
        artifacts_pb2.GetArtifactRequest(artifact_id=str(row["id"])), metadata=auth(tenants["a"][1])))
