"""GetJob and ListJobs give the same outputs; a private artifact is never listed (GetArtifact would refuse it)."""
import grpc

from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common import db
from tests import harness


def test_list_and_get_agree_and_private_artifacts_are_not_listed(settings, platform, tenants, workers):
    tenant, token = tenants["a"]
    with grpc.insecure_channel(platform.address) as ch:
        stub = jobs_pb2_grpc.JobServiceStub(ch)
        job = stub.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=2, step_seconds=0.01),
                                    metadata=harness.auth(token)).job
        workers()
        done = harness.wait_job(stub, token, job.id)
        with db.connect(settings) as conn:  # mark one output private, as certified unlearning's state is
            conn.execute("UPDATE artifacts SET metadata = metadata || %s::jsonb "
                         "WHERE producing_job_id = %s AND name = 'selftest-report.txt'",
                         ('{"visibility": "private"}', job.id))
        got = stub.GetJob(jobs_pb2.GetJobRequest(job_id=job.id), metadata=harness.auth(token)).job
        listed = next(j for j in stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=50),
                                               metadata=harness.auth(token)).jobs if j.id == job.id)
    assert "selftest-report.txt" in [a.name for a in done.artifacts]
    assert [a.name for a in got.artifacts] == [a.name for a in listed.artifacts]
    assert "selftest-report.txt" not in [a.name for a in got.artifacts] and got.artifacts
    assert [(m.name, m.version) for m in got.models] == [(m.name, m.version) for m in listed.models] != []
