"""JobService through the real server, interceptors, PostgreSQL, Redis, S3 and worker processes."""
from __future__ import annotations

import threading

import grpc
import pytest

from praxon.common.v1 import common_pb2
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from tests.harness import auth, job_row, wait_for


@pytest.fixture
def jobs(platform):
    return jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(platform.address))


def start_selftest(jobs, token, steps=5, step_seconds=0.05, key=""):
    return jobs.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=steps, step_seconds=step_seconds,
                                                                  idempotency_key=key), metadata=auth(token)).job


def test_idempotency_key_returns_the_same_job(jobs, tenants):
    _, token = tenants["a"]
    first = start_selftest(jobs, token, key="same-key-1")
    second = start_selftest(jobs, token, key="same-key-1")
    other = start_selftest(jobs, token, key="other-key-1")
    assert first.id == second.id
    assert other.id != first.id
    # another tenant may use the same key for its own job
    assert start_selftest(jobs, tenants["b"][1], key="same-key-1").id != first.id


def test_selftest_job_runs_to_success_with_outputs(jobs, tenants, workers, platform):
    _, token = tenants["a"]
    workers()
    job = start_selftest(jobs, token, steps=4)
    events = [r.event for r in jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job.id), metadata=auth(token), timeout=120)]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[0].state == common_pb2.JOB_STATE_QUEUED
    assert events[-1].state == common_pb2.JOB_STATE_SUCCEEDED
    assert [e.metrics["step"] for e in events if "step" in e.metrics] == [1, 2, 3, 4]
    final = jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job.id), metadata=auth(token)).job
    assert final.progress == 1.0 and final.result["steps"] == 4
    assert sorted(a.name for a in final.artifacts) == ["model/selftest/weights.safetensors", "selftest-report.txt"]
    assert all(len(a.sha256) == 64 and a.size_bytes > 0 for a in final.artifacts)
    registry = models_pb2_grpc.ModelRegistryServiceStub(grpc.insecure_channel(platform.address))
    version = registry.GetModelVersion(models_pb2.GetModelVersionRequest(
        model=common_pb2.ModelRef(name="selftest", version=final.models[0].version)), metadata=auth(token)).version
    assert version.producing_job_id == job.id and version.kind == "selftest"


def test_two_watchers_see_every_event_in_order(jobs, tenants, workers):
    _, token = tenants["a"]
    job = start_selftest(jobs, token, steps=6, step_seconds=0.1)
    seen: dict[int, list] = {0: [], 1: []}

    def watch(i):
        for r in jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job.id), metadata=auth(token), timeout=120):
            seen[i].append((r.event.sequence, r.event.state, r.event.progress, r.event.message))
    threads = [threading.Thread(target=watch, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    workers()  # start the worker only once both watch, so they see the job live
    for t in threads:
        t.join(120)
    assert seen[0] == seen[1]
    assert [s[0] for s in seen[0]] == list(range(1, len(seen[0]) + 1))
    assert seen[0][-1][1] == common_pb2.JOB_STATE_SUCCEEDED
    assert sum(1 for s in seen[0] if s[3].startswith("step ")) == 6


def test_cancel_queued_job_never_starts(jobs, tenants, settings, workers):
    _, token = tenants["a"]
    job = start_selftest(jobs, token, steps=3)
    cancelled = jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.id), metadata=auth(token)).job
    assert cancelled.state == common_pb2.JOB_STATE_CANCELLED
    workers()
    # a later job on the same queue finishing proves the worker consumed (and skipped) the cancelled one
    later = start_selftest(jobs, token, steps=1)
    wait_for(lambda: job_row(settings, later.id)["state"] == "SUCCEEDED", 90, what="later job")
    row = job_row(settings, job.id)
    assert row["state"] == "CANCELLED" and row["attempts"] == 0 and row["started_at"] is None


def test_cancel_running_job_stops_without_outputs(jobs, tenants, settings, workers):
    _, token = tenants["a"]
    workers()
    job = start_selftest(jobs, token, steps=200, step_seconds=0.1)
    wait_for(lambda: job_row(settings, job.id)["progress"] >= 0.02, 90, what="job running")
    jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.id), metadata=auth(token))
    wait_for(lambda: job_row(settings, job.id)["state"] == "CANCELLED", 60, what="cancelled")
    final = jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job.id), metadata=auth(token)).job
    assert final.progress < 1.0
    assert list(final.artifacts) == [] and list(final.models) == []
    from services.common import db
    with db.connect(settings) as conn:  # nothing staged was left behind either
        assert conn.execute("SELECT count(*) AS n FROM artifacts WHERE producing_job_id = %s",
                            (job.id,)).fetchone()["n"] == 0


def test_list_jobs_pages_and_filters(jobs, tenants):
    _, token = tenants["b"]
    ids = {start_selftest(jobs, token, key=f"page-{i}").id for i in range(5)}
    seen, page = [], ""
    while True:
        resp = jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=2, page_token=page, kind="platform.selftest"),
                             metadata=auth(token))
        seen += [j.id for j in resp.jobs]
        page = resp.next_page_token
        if not page:
            break
    assert ids <= set(seen) and len(seen) == len(set(seen))
    succeeded = jobs.ListJobs(jobs_pb2.ListJobsRequest(states=[common_pb2.JOB_STATE_SUCCEEDED]), metadata=auth(token))
    assert all(j.state == common_pb2.JOB_STATE_SUCCEEDED for j in succeeded.jobs)
    # child jobs of a job (tests/workers/test_child_jobs.py has jobs that have some): none here, and a UUID is required
    assert not jobs.ListJobs(jobs_pb2.ListJobsRequest(parent_job_id=min(ids)), metadata=auth(token)).jobs
    with pytest.raises(grpc.RpcError) as e:
        jobs.ListJobs(jobs_pb2.ListJobsRequest(parent_job_id="not-a-job"), metadata=auth(token))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
