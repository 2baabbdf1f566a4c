"""A job runs once in effect: kill -9 its worker mid-job and it resumes from its checkpoint on another
worker, ending SUCCEEDED with one set of outputs. For both brokers the platform supports."""
from __future__ import annotations

import uuid

import pytest

from services.common import db
from services.common.jobs import JobStore
from services.common.queue import make_celery
from tests import harness
from tests.job_kinds import expected_digest


@pytest.fixture(params=["redis", "rabbitmq"])
def broker_settings(request, settings, redis_db):
    url = f"{harness.REDIS_URL}/{redis_db}" if request.param == "redis" else harness.RABBIT_URL
    # a queue namespace of our own on RabbitMQ is the vhost; the job table is what makes this safe anyway
    return settings.model_copy(update={"broker_url": type(settings.broker_url)(url)})


def test_killed_worker_job_resumes_from_checkpoint_once(broker_settings, tenants, workers):
    s = broker_settings
    pool = db.create_pool(s, max_size=2)
    try:
        store = JobStore(pool, make_celery(s))
        job = store.submit(tenants["a"][0], "test.counter", {"steps": 24, "step_seconds": 0.25},
                           f"kill-{uuid.uuid4().hex}")
        first = workers(s)
        harness.wait_for(lambda: harness.job_row(s, job["id"])["progress"] >= 0.25, 120, what="first worker progress")
        first.kill9()
        killed_at = harness.job_row(s, job["id"])["progress"]
        workers(s)
        row = harness.wait_for(lambda: (r := harness.job_row(s, job["id"]))["state"] in ("SUCCEEDED", "FAILED") and r,
                               300, what="job to finish on the second worker")
        assert row["state"] == "SUCCEEDED", row["error_message"]
        starts = row["result"]["starts"]
        assert starts[0] == 0 and len(starts) == 2 and 0 < starts[1] <= round(killed_at * 24) + 1, starts
        assert row["result"]["digest"] == expected_digest(24)  # every step applied exactly once
        assert row["attempts"] == 2
        with db.connect(s) as conn:
            arts = conn.execute("SELECT name, committed FROM artifacts WHERE producing_job_id = %s ORDER BY name",
                                (job["id"],)).fetchall()
            versions = conn.execute("SELECT version FROM model_versions WHERE producing_job_id = %s",
                                    (job["id"],)).fetchall()
            messages = [r["message"] for r in conn.execute(
                "SELECT message FROM job_events WHERE job_id = %s ORDER BY seq", (job["id"],))]
        assert [(a["name"], a["committed"]) for a in arts] == [("counter.txt", True),
                                                               ("model/counter/weights.safetensors", True)]
        assert len(versions) == 1
        assert any("worker lost" in m for m in messages) and any("resuming from checkpoint" in m for m in messages)
    finally:
        pool.close()
