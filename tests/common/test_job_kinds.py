"""A job kind as its spec declares it (services/common/spec.py JobKind: queue, target, params, on_finish), against the
real job store: params are validated once, at submit, by the kind's model (INVALID_ARGUMENT naming the field,
nothing written); every terminal transition calls the kind's on_finish hook inside its own transaction, and a hook
that raises rolls the transition back. The kinds are tests/job_kinds.py's (test.typed), found through the catalog
as every process finds them."""
from __future__ import annotations

import uuid

import pytest

from services import catalog
from services.common import db
from services.common.errors import InvalidArgument
from services.common.jobs import TERMINAL, JobStore
from services.common.queue import make_celery
from tests.job_kinds import HOOK_RAISES, TypedParams


class Outputs:
    def commit_job_outputs(self, conn, job_id):
        pass

    def discard_job_outputs(self, conn, job_id):
        pass


@pytest.fixture(scope="module")
def store(settings):
    # a broker database of this module's own: nothing consumes the messages these jobs enqueue
    s = settings.model_copy(update={"broker_url": type(settings.broker_url)(
        settings.broker_url.get_secret_value().rsplit("/", 1)[0] + "/0")})
    pool = db.create_pool(s, max_size=4)
    yield JobStore(pool, make_celery(s))
    pool.close()


def row(store, job_id):
    with store.pool.connection() as conn:
        return conn.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()


def event_count(store, job_id) -> int:
    with store.pool.connection() as conn:
        return conn.execute("SELECT count(*) AS n FROM job_events WHERE job_id = %s", (job_id,)).fetchone()["n"]


def submit(store, tenant, params, key=None):
    return store.submit(tenant, "test.typed", params, key or f"kinds-{uuid.uuid4().hex}")


def test_the_catalog_is_where_kinds_are_found(settings):  # (its settings host tests/job_kinds.py)
    kind = catalog.job_kind("test.typed")
    assert kind is not None and kind.params_model() is TypedParams
    assert catalog.job_kinds()["test.typed"] is kind and catalog.job_kind("test.nothing") is None
    assert catalog.job_kind("unlearning.unlearn").finish_hook().__module__ == "services.unlearning.hooks"
    assert catalog.job_kind("design.gameopt.suggest").finish_hook().__module__ == "services.design.gameopt.hooks"


@pytest.mark.parametrize("params, field", [
    ({"steps": 0}, "steps"),
    ({"steps": 3, "label": "x" * 21}, "label"),
    ({"steps": 3, "speed": 1}, "speed"),
    ({}, "steps"),
])
def test_submit_validates_params_by_the_kinds_model_and_writes_nothing_when_invalid(store, tenants, params, field):
    key = f"kinds-{uuid.uuid4().hex}"
    with pytest.raises(InvalidArgument) as err:
        submit(store, tenants["a"][0], params, key)
    assert [v.field for v in err.value.violations] == [field]
    with store.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM jobs WHERE idempotency_key = %s", (key,)).fetchone()["n"] == 0


def test_submit_takes_the_typed_object_or_a_dict(store, tenants):
    tenant = tenants["a"][0]
    typed = submit(store, tenant, TypedParams(steps=3))
    assert typed["params"] == {"steps": 3}  # what was set, as JSON: the job reads its typed params from it
    plain = submit(store, tenant, {"steps": 4, "label": "x"})
    assert plain["params"] == {"steps": 4, "label": "x"}


def _running(store, tenant, label=""):
    job_id = str(submit(store, tenant, {"steps": 1, "label": label})["id"])
    assert store.claim(job_id, "w", 30) is not None
    return job_id


@pytest.mark.parametrize("state", TERMINAL)
def test_finish_runs_the_hook_in_the_finishing_transaction(store, tenants, state):
    job_id = _running(store, tenants["a"][0])
    store.finish(job_id, "w", state, Outputs(), progress=0.5, message="done")
    r = row(store, job_id)
    assert r["state"] == state and r["message"] == f"done [on_finish saw {state}]"


def test_cancel_and_cancel_unstarted_run_the_hook(store, tenants):
    tenant = tenants["a"][0]
    queued = str(submit(store, tenant, {"steps": 1})["id"])
    assert store.cancel(tenant, queued)["state"] == "CANCELLED"
    assert row(store, queued)["message"] == "cancelled before start [on_finish saw CANCELLED]"
    running = _running(store, tenant)
    store.cancel(tenant, running)  # a running job is only flagged: not a terminal transition, no hook
    assert row(store, running)["state"] == "RUNNING" and "on_finish" not in row(store, running)["message"]
    store.release(running, "w", 0.0, "back to the queue")
    assert store.claim(running, "w", 30) is None and store.cancel_unstarted(running) is True
    assert row(store, running)["state"] == "CANCELLED"
    assert row(store, running)["message"].endswith("[on_finish saw CANCELLED]")


@pytest.mark.parametrize("state", TERMINAL)
def test_a_hook_that_raises_rolls_the_finish_back(store, tenants, state):
    """Chosen: the hook is part of the transition. Raising undoes the new state, its event and the hook's own
    writes; the run still owns its job (it may finish it otherwise, or the reaper re-queues it)."""
    job_id = _running(store, tenants["a"][0], HOOK_RAISES)
    before, events = row(store, job_id), event_count(store, job_id)
    with pytest.raises(RuntimeError, match="on_finish failed"):
        store.finish(job_id, "w", state, Outputs(), progress=0.5, message="done")
    after = row(store, job_id)
    assert (after["state"], after["lease_owner"], after["message"], after["finished_at"]) == (
        "RUNNING", "w", before["message"], None)
    assert event_count(store, job_id) == events


def test_a_hook_that_raises_rolls_the_cancel_back(store, tenants):
    tenant = tenants["a"][0]
    job_id = str(submit(store, tenant, {"steps": 1, "label": HOOK_RAISES})["id"])
    before, events = row(store, job_id), event_count(store, job_id)
    with pytest.raises(RuntimeError, match="on_finish failed"):
        store.cancel(tenant, job_id)
    r = row(store, job_id)
    assert (r["state"], r["cancel_requested"], r["message"]) == ("QUEUED", False, before["message"])
    assert event_count(store, job_id) == events


def test_no_job_kind_is_named_in_the_databases_sql(store):
    """What a service does when its jobs end is its hook: no trigger or function in the database names a kind
    (migration 0070 dropped the two that did)."""
    with store.pool.connection() as conn:
        sources = [r["src"] for r in conn.execute(
            "SELECT p.prosrc AS src FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'public' UNION ALL "
            "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t WHERE NOT t.tgisinternal")]
        triggers = {r["tgname"] for r in conn.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'jobs'::regclass "
                                                      "AND NOT tgisinternal")}
    assert sources  # (the unlearning tables' immutability triggers are still there)
    assert not triggers
    assert [k for k in catalog.job_kinds() for src in sources if k in src] == []
