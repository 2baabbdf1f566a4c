"""PostgreSQL restarted in the middle of a job: the worker retries, the job still completes."""
from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from services.common import db
from services.common.embedded import EmbeddedPostgres
from services.common.jobs import JobStore
from services.common.queue import make_celery
from tests import harness
from tests.job_kinds import expected_digest


@pytest.fixture
def pg_dir():
    """Outside pytest's basetemp: as root the embedded PostgreSQL runs as its own user and needs every parent
    searchable, and another pytest session starting meanwhile resets /tmp/pytest-of-<user> to 0700."""
    path = Path(tempfile.mkdtemp(prefix="praxon-pg-test-"))
    path.chmod(0o755)
    yield path / "pg"
    shutil.rmtree(path, ignore_errors=True)


def test_job_survives_a_postgres_restart(settings, tenants, workers, pg_dir):  # tenants: the schema
    pg = EmbeddedPostgres(pg_dir).start()
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
