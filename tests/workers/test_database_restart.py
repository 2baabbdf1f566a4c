"""PostgreSQL restarted in the middle of a job: the worker retries, the job still completes."""
from __future__ import annotations

import time
import uuid

from services.common import db
from services.common.embedded import EmbeddedPostgres
from services.common.jobs import JobStore
from services.common.queue import make_celery
from tests import harness
from tests.job_kinds import expected_digest


def test_job_survives_a_postgres_restart(settings, tenants, workers, tmp_path):
    pg = EmbeddedPostgres(tmp_path / "pg").start()
    try:
        s = settings.model_copy(deep=True)
        s.database_url = type(settings.database_url)(pg.url("praxon"))
        s.jobs.lease_seconds = 10.0
        db.ensure_database(s)
        db.migrate(s)
        tenant_id, _ = harness.token_for(s, "restart-tenant")
        pool = db.create_pool(s, max_size=2)
        job = JobStore(pool, make_celery(s)).submit(tenant_id, "test.counter", {"steps": 16, "step_seconds": 0.25},
                                                    f"pg-{uuid.uuid4().hex}")
        pool.close()
        workers(s)
        harness.wait_for(lambda: harness.job_row(s, job["id"])["progress"] >= 0.2, 120, what="progress")
        pg.stop()
        time.sleep(3)  # the job keeps stepping; its writes fail and back off
        pg.start()
        row = harness.wait_for(lambda: (r := harness.job_row(s, job["id"]))["state"] in ("SUCCEEDED", "FAILED") and r,
                               180, what="job to finish")
        assert row["state"] == "SUCCEEDED", row["error_message"]
        assert row["result"]["digest"] == expected_digest(16)
    finally:
        pg.stop()
