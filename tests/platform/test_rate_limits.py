"""Request rate per API token: over the bucket -> RESOURCE_EXHAUSTED with RetryInfo; other tokens unaffected."""
import grpc
import pytest

from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common.errors import ResourceExhausted
from services.common.server import TokenBuckets
from tests import harness


def test_bucket_refills_at_its_rate():
    b = TokenBuckets(rate=2.0, burst=3)
    for _ in range(3):
        b.take("t", now=100.0)
    with pytest.raises(ResourceExhausted) as e:
        b.take("t", now=100.0)
    assert e.value.retry_after_s == pytest.approx(0.5)
    b.take("other", now=100.0)  # per token
    b.take("t", now=100.5)      # one call refilled after 1/rate seconds
    with pytest.raises(ResourceExhausted):
        b.take("t", now=100.6)
    TokenBuckets(rate=0, burst=1).take("t")  # 0 = unlimited


def test_a_full_table_drops_refilled_buckets_first_else_the_oldest():
    b = TokenBuckets(rate=1.0, burst=2, max_tokens=2)
    b.take("idle", now=0.0)
    b.take("busy", now=0.0)
    b.take("busy", now=0.0)        # "busy" has spent its burst
    b.take("new", now=0.0)         # the table is full and nothing has refilled: the oldest ("idle") is dropped
    with pytest.raises(ResourceExhausted):
        b.take("busy", now=0.0)    # "busy" is kept, still empty
    b.take("busy", now=1.0)        # busy: 1 refilled, 0 left
    b.take("new", now=1.0)         # new: 2 (its burst), 1 left
    b.take("third", now=2.0)       # full again: "new" has refilled (1 + 1) and goes; "busy" (1), though older, stays
    assert set(b._buckets) == {"busy", "third"}
    b.take("busy", now=2.0)
    with pytest.raises(ResourceExhausted):
        b.take("busy", now=2.0)


def test_the_server_enforces_it_per_token(settings):
    limited = settings.model_copy(deep=True)
    limited.grpc.requests_per_second_per_token = 0.5
    limited.grpc.request_burst_per_token = 3
    _, token_a = harness.token_for(limited, "rate-a")
    _, token_b = harness.token_for(limited, "rate-b")
    server = harness.PlatformServer(limited, ["platform"])
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = jobs_pb2_grpc.JobServiceStub(channel)
            for _ in range(3):
                stub.ListJobs(jobs_pb2.ListJobsRequest(), metadata=harness.auth(token_a), timeout=10)
            with pytest.raises(grpc.RpcError) as e:
                stub.ListJobs(jobs_pb2.ListJobsRequest(), metadata=harness.auth(token_a), timeout=10)
            code, info, _, retry = harness.rpc_error_details(e.value)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and info.reason == "RATE_LIMITED"
            assert 0 < retry.retry_delay.ToMilliseconds() <= 2000
            stub.ListJobs(jobs_pb2.ListJobsRequest(), metadata=harness.auth(token_b), timeout=10)
    finally:
        server.stop()
