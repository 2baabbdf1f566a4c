"""A real worker runs a kind with a params model and an on_finish hook (tests/job_kinds.py test.typed): the job
receives the typed object its kind's model makes of the params submit validated, and the hook's write commits with
the SUCCEEDED state."""
from __future__ import annotations

import uuid

import pytest

from services.common import db
from services.common.jobs import JobStore
from services.common.queue import make_celery
from tests import harness


@pytest.fixture
def private(settings):
    with harness.private_platform(settings) as s:
        yield s


def test_the_job_receives_its_typed_params_and_its_hook_commits_with_the_state(private, workers):
    s = private
    tenant, _ = harness.token_for(s, f"typed-{uuid.uuid4().hex[:6]}")
    pool = db.create_pool(s, max_size=2)
    try:
        job = JobStore(pool, make_celery(s)).submit(tenant, "test.typed", {"steps": 2, "label": "w"})
        workers(s, queues="default")
        row = harness.wait_for(lambda: (r := harness.job_row(s, job["id"]))["state"] in (
            "SUCCEEDED", "FAILED", "CANCELLED") and r, 120, what="the typed job to finish")
        assert row["state"] == "SUCCEEDED", (row["error_reason"], row["error_message"])
        assert row["result"] == {"params_type": "TypedParams", "steps": 2, "label": "w"}
        assert row["message"] == "succeeded [on_finish saw SUCCEEDED]"
    finally:
        pool.close()
