"""Per-tenant job quotas: over the limit (in all, or of one kind) -> RESOURCE_EXHAUSTED with RetryInfo; other
tenants and known idempotency keys are unaffected; finished jobs free the quota. Nothing runs these jobs (no
worker), so they stay QUEUED: exactly what a flood of submissions looks like."""
import threading

import pytest

from services.common import db
from services.common.errors import ResourceExhausted
from services.common.jobs import JobQuota, JobStore
from services.common.queue import make_celery
from tests import harness


@pytest.fixture
def store(settings):
    with harness.private_platform(settings) as private:
        pool = db.create_pool(private, max_size=2)
        try:
            yield private, JobStore(pool, make_celery(private), JobQuota(per_tenant=5, per_kind=3,
                                                                           retry_after_s=2.0))
        finally:
            pool.close()


def test_quotas_per_kind_and_per_tenant(store):
    settings, jobs = store
    a, _ = harness.token_for(settings, "quota-a")
    b, _ = harness.token_for(settings, "quota-b")
    first = [jobs.submit(a, "test.counter", {"steps": 1}, idempotency_key=f"k{i}") for i in range(3)]
    with pytest.raises(ResourceExhausted) as e:
        jobs.submit(a, "test.counter", {"steps": 1})
    assert e.value.reason == "JOB_QUOTA_EXCEEDED" and e.value.retry_after_s == 2.0
    assert jobs.submit(a, "test.counter", {"steps": 1}, idempotency_key="k1")["id"] == first[1]["id"]
    jobs.submit(b, "test.counter", {"steps": 1})  # another tenant has its own quota
    jobs.submit(a, "platform.selftest", {"steps": 1})
    jobs.submit(a, "platform.selftest", {"steps": 1})
    with pytest.raises(ResourceExhausted, match="5 unfinished jobs"):  # 3 + 2: the tenant-wide limit
        jobs.submit(a, "platform.selftest", {"steps": 1})
    jobs.cancel(a, str(first[0]["id"]))  # a queued job cancelled is finished: it frees its slot
    jobs.submit(a, "platform.selftest", {"steps": 1})


def test_concurrent_submits_never_overshoot_the_quota(store):
    """The quota is a condition of the INSERT, serialised per tenant: many submits at once admit exactly the limit."""
    settings, _ = store
    tenant, _ = harness.token_for(settings, "quota-race")
    pool = db.create_pool(settings, max_size=8)
    jobs = JobStore(pool, make_celery(settings), JobQuota(per_tenant=5, per_kind=0))
    admitted, refused, start = [], [], threading.Barrier(16)

    def submit(i: int) -> None:
        start.wait(30)
        try:
            admitted.append(jobs.submit(tenant, "test.counter", {"steps": 1}, idempotency_key=f"race{i}"))
        except ResourceExhausted:
            refused.append(i)
    try:
        threads = [threading.Thread(target=submit, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(admitted) == 5 and len(refused) == 11
        with db.connect(settings) as conn:
            assert conn.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s", (tenant,)).fetchone()["n"] == 5
        # a refused key was not used up: once a slot is free, the same key is admitted
        jobs.cancel(tenant, str(admitted[0]["id"]))
        assert jobs.submit(tenant, "test.counter", {"steps": 1}, idempotency_key=f"race{refused[0]}")["state"] == "QUEUED"
    finally:
        pool.close()
