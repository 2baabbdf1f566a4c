"""Child jobs (JobContext.start_child / wait_for_children) with one real worker: a parent waits for its children
without holding the worker (no deadlock with one worker), a wait is not an attempt, a quota refusal waits, and
cancelling the parent cancels its children. The parent kind below is hosted by the worker via extra_services."""
from __future__ import annotations

import uuid

import pytest

from services import catalog
from services.common import db
from services.common.jobcontext import JobContext
from services.common.jobs import JobStore
from services.common.queue import make_celery
from services.common.spec import JobKind, ServiceSpec
from tests import harness

HERE = "tests.workers.test_child_jobs"


def run_parent(ctx: JobContext) -> dict:
    """Starts `children` test.counter jobs and reports how each ended."""
    n, steps = int(ctx.params["children"]), int(ctx.params["steps"])
    ids = [ctx.start_child("test.counter", {"steps": steps, "step_seconds": float(ctx.params["step_seconds"])},
                           key=f"c{i}") for i in range(n)]
    done = ctx.wait_for_children(ids)
    return {"children": [{"job_id": c["job_id"], "state": c["state"], "models": c["models"],
                          "digest": (c["result"] or {}).get("digest")} for c in done]}


SPEC = ServiceSpec(name="testchildren", job_kinds={"testchildren.parent": JobKind("default", f"{HERE}:run_parent")})


@pytest.fixture
def child_settings(settings):
    """A database and broker of their own, the parent kind installed here and in the worker."""
    catalog.add(SPEC)
    with harness.private_platform(settings) as private:
        private.extra_services = [*private.extra_services, f"{HERE}:SPEC"]
        yield private


def _events(s, job_id) -> list[str]:
    with db.connect(s) as conn:
        return [r["message"] for r in conn.execute("SELECT message FROM job_events WHERE job_id = %s ORDER BY seq",
                                                   (job_id,))]


def test_parent_waits_for_its_children_on_one_worker(child_settings, workers, monkeypatch):
    """A per-tenant quota of 1 unfinished job in the worker (a waiting parent is not counted): the parent's second
    child has to wait for the first to end."""
    s = child_settings
    monkeypatch.setenv("PRAXON_JOBS__MAX_ACTIVE_PER_TENANT", "1")  # the worker's environment (settings_env has no quota)
    tenant, _ = harness.token_for(s, f"children-{uuid.uuid4().hex[:6]}")
    pool = db.create_pool(s, max_size=2)
    try:
        store = JobStore(pool, make_celery(s))
        parent = store.submit(tenant, "testchildren.parent", {"children": 2, "steps": 4, "step_seconds": 0.2})
        workers(s, queues="default")  # ONE worker: it must run the children while the parent waits
        row = harness.wait_for(lambda: (r := harness.job_row(s, parent["id"]))["state"] in (
            "SUCCEEDED", "FAILED", "CANCELLED") and r, 240, what="the parent to finish")
        assert row["state"] == "SUCCEEDED", (row["error_reason"], row["error_message"])
        kids = row["result"]["children"]
        assert [k["state"] for k in kids] == ["SUCCEEDED"] * 2 and len({k["job_id"] for k in kids}) == 2
        assert all(k["digest"] for k in kids) and all(k["models"] == [{"name": "counter", "version": k["models"][0][
            "version"]}] for k in kids)
        listed, _ = store.list(tenant, size=10, parent_job_id=str(parent["id"]))
        assert sorted(str(r["id"]) for r in listed) == sorted(k["job_id"] for k in kids)
        assert all(r["kind"] == "test.counter" and r["attempts"] == 1 for r in listed)
        messages = _events(s, parent["id"])
        assert any(m.startswith("waiting to start child job 'c1'") for m in messages), messages  # the quota
        assert any(m.startswith("waiting for") for m in messages), messages
        assert row["attempts"] == 1  # however often it waited
    finally:
        pool.close()


def test_cancelling_the_parent_cancels_its_children(child_settings, workers):
    s = child_settings
    tenant, _ = harness.token_for(s, f"children-{uuid.uuid4().hex[:6]}")
    pool = db.create_pool(s, max_size=2)
    try:
        store = JobStore(pool, make_celery(s))
        parent = store.submit(tenant, "testchildren.parent", {"children": 2, "steps": 400, "step_seconds": 0.05})
        workers(s, queues="default")

        def running_child():
            kids, _ = store.list(tenant, size=10, parent_job_id=str(parent["id"]))
            return kids if any(k["state"] == "RUNNING" for k in kids) else None
        kids = harness.wait_for(running_child, 120, what="a running child")
        assert len(kids) == 2
        store.cancel(tenant, str(parent["id"]))
        for job_id in [parent["id"], *(k["id"] for k in kids)]:
            row = harness.wait_for(lambda j=job_id: (r := harness.job_row(s, j))["state"] not in ("QUEUED", "RUNNING")
                                   and r, 120, what=f"job {job_id} to end")
            assert row["state"] == "CANCELLED", row
        with db.connect(s) as conn:
            committed = conn.execute("SELECT count(*) AS n FROM model_versions WHERE committed AND producing_job_id "
                                     "= ANY(%s::uuid[])", ([str(k["id"]) for k in kids],)).fetchone()["n"]
        assert committed == 0
    finally:
        pool.close()
