"""JobStore, the whole job-row state machine, against real PostgreSQL: claim is exclusive, a run that lost its lease
cannot write, finish commits or discards outputs with the state, release/cancel/requeue move the row as documented,
and the event log stays gapless. (The worker runner over it is covered by tests/workers and tests/platform.)"""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings as hsettings
from hypothesis import strategies as st

from services.common import db
from services.common.jobs import TERMINAL, JobStore, LeaseLost
from services.common.queue import make_celery


class Outputs:
    """Records what finish() asked of the registry, inside its transaction."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []

    def commit_job_outputs(self, conn, job_id):
        self.calls.append(("commit", str(job_id)))

    def discard_job_outputs(self, conn, job_id):
        self.calls.append(("discard", str(job_id)))


@pytest.fixture(scope="module")
def store(settings):
    # a broker database of this module's own: nothing consumes the messages these jobs enqueue
    s = settings.model_copy(update={"broker_url": type(settings.broker_url)(
        settings.broker_url.get_secret_value().rsplit("/", 1)[0] + "/0")})
    pool = db.create_pool(s, max_size=4)
    yield JobStore(pool, make_celery(s))
    pool.close()


def submit(store, tenant_id):
    return store.submit(tenant_id, "platform.selftest", {"steps": 1}, f"store-{uuid.uuid4().hex}")


def row(store, job_id):
    with store.pool.connection() as conn:
        return conn.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()


def events(store, job_id):
    return [(e["seq"], e["state"], e["message"]) for e in store.events_after(str(job_id), 0)]


def test_claim_is_exclusive_and_only_the_owner_writes(store, tenants):
    job = submit(store, tenants["a"][0])
    jid = str(job["id"])
    claimed = store.claim(jid, "w1", 30)
    assert claimed["state"] == "RUNNING" and claimed["lease_owner"] == "w1" and claimed["attempts"] == 1
    assert store.claim(jid, "w2", 30) is None  # a second delivery leaves it
    assert store.renew(jid, "w1", 30) is False and store.renew(jid, "w2", 30) is None
    assert store.progress(jid, "w1", 0.5, "half", {"loss": 1.5}) is False
    with pytest.raises(LeaseLost):
        store.progress(jid, "w2", 0.9, "not mine")
    with pytest.raises(LeaseLost):
        store.set_checkpoint(jid, "w2", "k", "d")
    store.set_checkpoint(jid, "w1", "ckpt/key", "abc")
    assert store.checkpoint(jid) == ("ckpt/key", "abc")
    outputs = Outputs()
    with pytest.raises(LeaseLost):
        store.finish(jid, "w2", "SUCCEEDED", outputs, progress=0.5)
    assert outputs.calls == []  # nothing committed by a run that does not own the job
    store.finish(jid, "w1", "SUCCEEDED", outputs, progress=0.5, result={"ok": True}, message="succeeded")
    r = row(store, jid)
    assert (r["state"], r["progress"], r["result"], r["lease_owner"]) == ("SUCCEEDED", 1.0, {"ok": True}, None)
    assert outputs.calls == [("commit", jid)]
    assert store.renew(jid, "w1", 30) is None  # ended: the lease is gone
    seqs = [e[0] for e in events(store, jid)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert [e[1] for e in events(store, jid)] == ["QUEUED", "RUNNING", "RUNNING", "SUCCEEDED"]


def test_failed_and_cancelled_discard_outputs_and_keep_progress(store, tenants):
    for state in ("FAILED", "CANCELLED"):
        jid = str(submit(store, tenants["a"][0])["id"])
        store.claim(jid, "w", 30)
        store.progress(jid, "w", 0.25, "a quarter")
        outputs = Outputs()
        store.finish(jid, "w", state, outputs, progress=0.25, reason="BROKEN" if state == "FAILED" else None,
                     message="boom" if state == "FAILED" else "")
        r = row(store, jid)
        assert r["state"] == state and r["progress"] == 0.25 and outputs.calls == [("discard", jid)]
        assert r["error_reason"] == ("BROKEN" if state == "FAILED" else None)
    with pytest.raises(ValueError):
        store.finish(jid, "w", "RUNNING", Outputs(), progress=0)


def test_release_cancel_and_requeue(store, tenants):
    tenant = tenants["a"][0]
    # release: back to QUEUED, claimable again (attempt 2), the checkpoint kept
    jid = str(submit(store, tenant)["id"])
    store.claim(jid, "w1", 30)
    store.set_checkpoint(jid, "w1", "ck", "sha")
    store.release(jid, "w1", 0.4, "transient failure; will resume")
    assert row(store, jid)["state"] == "QUEUED" and row(store, jid)["lease_owner"] is None
    again = store.claim(jid, "w2", 30)
    assert again["attempts"] == 2 and store.checkpoint(jid) == ("ck", "sha")
    assert "resuming from checkpoint" in events(store, jid)[-1][2]
    # cancel while running: flagged, reported to the owner's next renew/progress
    store.cancel(tenant, jid)
    assert store.renew(jid, "w2", 30) is True and store.progress(jid, "w2", 0.5) is True
    store.finish(jid, "w2", "CANCELLED", Outputs(), progress=0.5)
    # cancel while queued: CANCELLED at once; a late delivery neither claims it nor changes it
    jid = str(submit(store, tenant)["id"])
    assert store.cancel(tenant, jid)["state"] == "CANCELLED"
    assert store.claim(jid, "w", 30) is None and store.cancel_unstarted(jid) is False
    # a cancel flag on a QUEUED row (e.g. released, then cancelled): the next delivery ends it
    jid = str(submit(store, tenant)["id"])
    with store.pool.connection() as conn:
        conn.execute("UPDATE jobs SET cancel_requested = true WHERE id = %s", (jid,))
    assert store.claim(jid, "w", 30) is None and store.cancel_unstarted(jid) is True
    assert row(store, jid)["state"] == "CANCELLED"
    # the reaper: an expired lease goes back to QUEUED; the owner that lost it can no longer write
    jid = str(submit(store, tenant)["id"])
    store.claim(jid, "dead", 30)
    with store.pool.connection() as conn:
        conn.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (jid,))
    assert jid in store.requeue_stale(stale_queued_seconds=3600)
    assert row(store, jid)["state"] == "QUEUED"
    with pytest.raises(LeaseLost):
        store.progress(jid, "dead", 0.9)
    assert store.claim(jid, "alive", 30)["attempts"] == 2
    store.finish(jid, "alive", "SUCCEEDED", Outputs(), progress=0.9)


def test_a_write_that_waited_for_the_row_lock_appends_the_next_event(store, tenants):
    """A one-statement write (progress) that starts while a cancel holds the job's row lock waits for it, then
    appends its event after the cancel's: its event's seq comes from the locked row, not from a snapshot taken
    before the wait (that one collided with the cancel's event, a unique violation that failed the job)."""
    tenant = tenants["a"][0]
    jid = str(submit(store, tenant)["id"])
    store.claim(jid, "w", 30)
    got: list = []
    with store.pool.connection() as conn:
        locked = conn.execute("SELECT * FROM jobs WHERE id = %s FOR UPDATE", (jid,)).fetchone()
        store._cancel_locked(conn, locked)  # the cancel's event, not yet committed
        writer = threading.Thread(target=lambda: got.append(_outcome(store.progress, jid, "w", 0.5, "half")))
        writer.start()
        _wait_until_blocked_on_a_lock(store)
        conn.commit()
    writer.join(10)
    assert got == [True]  # it saw the cancel
    assert [(e[0], e[2]) for e in events(store, jid)][-2:] == [(3, "cancellation requested"), (4, "half")]


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the test compares it
        return exc


def _wait_until_blocked_on_a_lock(store, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    with store.pool.connection() as conn:
        conn.autocommit = True
        while conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND datname = current_database() AND query LIKE %s",
                           ("%INSERT INTO job_events%",)).fetchone()["n"] == 0:
            assert time.monotonic() < deadline, "the progress write never waited for the lock"
            time.sleep(0.01)
        conn.autocommit = False


OPS = st.lists(st.sampled_from(["claim_a", "claim_b", "renew_a", "progress_a", "progress_b", "release_a",
                                "finish_a", "finish_b", "cancel", "expire_and_reap"]), min_size=1, max_size=12)


@hsettings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_any_sequence_keeps_the_invariants(store, tenants, ops):
    """Whatever the order of deliveries, renewals, cancels and reaps: at most one owner, a terminal state never
    changes, outputs are committed at most once and only with SUCCEEDED, the event log is gapless."""
    tenant = tenants["a"][0]
    jid = str(submit(store, tenant)["id"])
    outputs = Outputs()
    for op in ops:
        before = row(store, jid)
        try:
            if op.startswith("claim"):
                store.claim(jid, op[-1], 30)
            elif op == "renew_a":
                store.renew(jid, "a", 30)
            elif op.startswith("progress"):
                store.progress(jid, op[-1], 0.5)
            elif op == "release_a":
                store.release(jid, "a", 0.5, "released")
            elif op.startswith("finish"):
                store.finish(jid, op[-1], "SUCCEEDED", outputs, progress=0.5)
            elif op == "cancel":
                store.cancel(tenant, jid)
            else:
                with store.pool.connection() as conn:
                    conn.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
                                 (jid,))
                store.requeue_stale(stale_queued_seconds=3600)
        except LeaseLost:
            pass
        after = row(store, jid)
        if before["state"] in TERMINAL:
            assert after["state"] == before["state"]
        assert (after["state"] == "RUNNING") == (after["lease_owner"] is not None)
    final = row(store, jid)
    assert outputs.calls == ([("commit", jid)] if final["state"] == "SUCCEEDED" else [])
    seqs = [e[0] for e in events(store, jid)]
    assert seqs == list(range(1, len(seqs) + 1))
    if final["state"] not in TERMINAL:  # leave nothing for a worker to pick up
        if final["state"] == "RUNNING":
            store.finish(jid, final["lease_owner"], "CANCELLED", Outputs(), progress=0)
        else:
            store.cancel(tenant, jid)
