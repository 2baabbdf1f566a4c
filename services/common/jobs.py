"""The job table: the single source of truth for every long job (see ARCHITECTURE, "The job lifecycle"). Every
statement that moves a job row lives in JobStore, so the state machine is readable in one place:

    submit            -> QUEUED                      (insert + commit, then enqueue; idempotency key; a child job
                                                      records its parent)
    claim             QUEUED -> RUNNING              (conditional UPDATE: one owner, a lease, attempts + 1)
    renew             RUNNING, same owner            (extends the lease; reports cancel_requested)
    progress / checkpoint / owned()                  (only while the caller still owns the lease)
    finish            RUNNING -> SUCCEEDED | FAILED | CANCELLED   (outputs committed or discarded in the same
                                                                   transaction)
    release           RUNNING -> QUEUED              (a transient failure: resume from the checkpoint; or a job
                                                      waiting for its child jobs, which is not an attempt)
    cancel            QUEUED -> CANCELLED, or RUNNING flagged (stops at its next step); the same for every
                                                      unfinished descendant (child jobs)
    cancel_unstarted  QUEUED + cancel_requested -> CANCELLED  (a delivery that found it cancelled)
    requeue_stale     RUNNING with an expired lease -> QUEUED, re-enqueued (the lease reaper); lost messages resent

Services submit and follow jobs here; the worker runner (workers/runner.py) claims, heartbeats and finishes them
here. A write by a run that no longer owns its job raises LeaseLost and changes nothing.

Job kinds come from the service specs (services/catalog.py; JobKind in services/common/spec.py): submit validates a
job's params with the model its kind names (once: a value the job would reject is refused there, INVALID_ARGUMENT
naming the field), and every transition to a terminal state (finish, cancel, cancel_unstarted) calls the kind's
on_finish(conn, job_row) hook in its own transaction: the hook's writes commit with the new state, and a hook that
raises rolls the transition back (the row keeps its state, the outputs stay uncommitted)."""
from __future__ import annotations

import base64
import binascii
import json
import logging
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Protocol

from celery import Celery
from psycopg import Connection
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from services.common.errors import Cancelled, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from services.common.queue import RUN_JOB_TASK
from services.common.spec import JobKind

log = logging.getLogger(__name__)

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
STATES = ("QUEUED", "RUNNING", *TERMINAL)
EVENTS_CHANNEL = "praxon_job_events"  # NOTIFY payload: the job id


def parse_uuid(value: str, field: str) -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise InvalidArgument(field, "must be a UUID") from None


def encode_page_token(created_at: datetime, job_id: str) -> str:
    raw = json.dumps({"c": created_at.isoformat(), "i": str(job_id)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_page_token(token: str, field: str = "page_token") -> tuple[datetime, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return datetime.fromisoformat(data["c"]), str(uuid.UUID(data["i"]))
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeError):
        raise InvalidArgument(field, "malformed page token") from None


def page_size(value: int, field: str = "page_size") -> int:
    if value < 0 or value > 500:
        raise InvalidArgument(field, "must be between 1 and 500 (0 for the default of 50)")
    return value or 50


def with_event(change: str, state: str, message: str, *, progress: str = "j.progress", metrics: str = "'{}'") -> str:
    """The one way a job's event is written: one statement that changes job rows (`change`: an INSERT INTO jobs or
    UPDATE jobs SET ... RETURNING *, named parameters; the caller holds the row lock or the change takes it), appends
    an event to each changed row's log and notifies watchers at commit; it returns the rows, each with a `notified`
    column (pop it). `state`, `message`, `progress` and `metrics` (jsonb) are SQL expressions over the changed row
    `j`. One round trip for what would be three statements (the change, the event, the notify).

    The event's seq is the row's own counter (`event_seq`, 1 for a new row, counted up by the UPDATE), not
    max(seq) + 1 over job_events: a statement that waited for the row's lock reads the locked row as committed but
    every other table as of before its wait, so a max(seq) could repeat the event of the transaction it waited for."""
    if change.startswith("UPDATE jobs SET "):
        change = "UPDATE jobs SET event_seq = event_seq + 1, " + change[len("UPDATE jobs SET "):]
    elif not change.startswith("INSERT INTO jobs "):  # a new row's event_seq is its default, 1
        raise ValueError("with_event needs an INSERT INTO jobs or an UPDATE jobs SET")
    return (f"WITH j AS ({change}), "
            "e AS (INSERT INTO job_events (job_id, seq, state, progress, message, metrics) "
            f"SELECT j.id, j.event_seq, {state}, {progress}, {message}, {metrics} FROM j) "
            f"SELECT j.*, pg_notify('{EVENTS_CHANNEL}', j.id::text) AS notified FROM j")


def _row(cursor) -> dict | None:
    """The one row a statement changed (None if none), without with_event's `notified` column."""
    row = cursor.fetchone()
    if row is not None:
        row.pop("notified", None)
    return row


# A condition (always true) that makes its statement's transaction commit before its WAL reaches disk
# (PostgreSQL's asynchronous commit: a crash of the database server, not a restart, can lose the last fraction of a
# second of such commits; nothing is corrupted). For the writes a lost copy of which the job system already
# survives: a claim (the row reads QUEUED again and the reaper re-sends it; the run that had it meets LeaseLost at
# its next write), a lease renewal (the lease may lapse early, the same), progress. Submit and finish stay durable:
# a client holds the job's id, and the broker's message is acknowledged only after finish. (A durable commit cost
# 0.4-2 ms on the 2-core reference machine, with its disk's load; benchmarks/platform/RESULTS.md.)
_NO_WAIT_FOR_DISK = "set_config('synchronous_commit', 'off', true) = 'off'"
# The rows a run may write to: its job's, while it still holds the lease (named parameters job, owner). As the
# condition of a single UPDATE it is the ownership check and the row lock in one statement.
_OWNED = "id = %(job)s AND lease_owner = %(owner)s AND state = 'RUNNING'"
# A tenant's unfinished jobs, in all and of one kind, not counting a child's parent (named parameters tenant, kind,
# parent); and the condition of a submit's INSERT that keeps them under the quota (per_tenant, per_kind; 0 = none).
_UNFINISHED = ("SELECT count(*) AS total, count(*) FILTER (WHERE kind = %(kind)s) AS of_kind FROM jobs "
               "WHERE tenant_id = %(tenant)s AND state IN ('QUEUED', 'RUNNING') AND id IS DISTINCT FROM %(parent)s")
_UNDER_QUOTA = "(%(per_tenant)s = 0 OR c.total < %(per_tenant)s) AND (%(per_kind)s = 0 OR c.of_kind < %(per_kind)s)"


class LeaseLost(Exception):
    """Another worker (via the reaper) owns the job now, or it ended: this run must stop without writing."""


class JobOutputs(Protocol):
    """What finish() commits or discards with the job's final state (services.common.registry.Registry)."""

    def commit_job_outputs(self, conn: Connection, job_id: str) -> None: ...

    def discard_job_outputs(self, conn: Connection, job_id: str) -> None: ...


@dataclass(frozen=True)
class JobQuota:
    """Unfinished jobs a tenant may have at once, in all and per kind (0 = no limit)."""

    per_tenant: int = 0
    per_kind: int = 0
    retry_after_s: float = 5.0


def catalog_kind(name: str) -> JobKind | None:
    """The job kind `name` as the hosted services declare it: the catalog's one list of specs (imported when first
    needed: common imports no service)."""
    from services import catalog

    return catalog.job_kind(name)


def typed_params(kind: JobKind, params: Any, *, prefix: str = "") -> Any:
    """`params` as the object the job receives: an instance of the kind's params model (validated: InvalidArgument
    naming each field, `prefix` + its path), or the dict itself for a kind without a model."""
    model = kind.params_model()
    if model is None:
        return params if isinstance(params, dict) else dict(params)
    from services.common.params import parse_params  # (params -> registry -> this module)

    return parse_params(model, params, prefix=prefix)


@dataclass
class JobStore:
    pool: ConnectionPool
    celery: Celery
    quota: JobQuota = JobQuota()
    # kind name -> JobKind (None: not available here); the catalog's specs unless a caller gives its own
    kinds: Callable[[str], JobKind | None] = catalog_kind

    def _ended(self, conn: Connection, row: dict) -> dict:
        """A job just reached a terminal state in `conn`'s transaction: run its kind's on_finish hook there."""
        kind = self.kinds(row["kind"])
        hook = kind.finish_hook() if kind is not None else None
        if hook is not None:
            hook(conn, row)
        return row

    # ---- producers (services) ----
    def submit(self, tenant_id: str, kind: str, params: Mapping[str, Any] | Any, idempotency_key: str = "",
               in_transaction: Callable[[Connection, dict], None] | None = None,
               parent_job_id: str | None = None) -> dict:
        """Insert the job (QUEUED) and commit, then enqueue. The same idempotency key returns the same job.
        `params`: a dict, or the kind's params model itself; validated by that model (InvalidArgument naming the
        field) before anything is written.
        `in_transaction(conn, job_row)` runs inside the inserting transaction (only for a new job), so rows a
        service keeps about the request (e.g. an audit record) exist if and only if the job does.
        `parent_job_id`: a child job of that (running) job of the same tenant; refused with Cancelled once the
        parent's cancellation was requested (the parent's row is locked, as cancel() locks it, so no child
        starts after a cancel cascaded)."""
        spec = self.kinds(kind)
        if spec is None:  # the kind is the service's choice, not the caller's input
            raise FailedPrecondition(f"job kind {kind} is not available in this deployment",
                                     reason="JOB_KIND_UNAVAILABLE")
        if len(idempotency_key) > 200 or not idempotency_key.isprintable():
            raise InvalidArgument("idempotency_key", "at most 200 printable characters")
        # validated once, here, by the kind's model; the row keeps the JSON the job's typed params are read from
        typed = typed_params(spec, params)
        if not isinstance(params, Mapping):  # the typed object: the JSON of what was set in it
            params = typed if isinstance(typed, dict) else typed.model_dump(mode="json", exclude_unset=True)
        queue = spec.queue
        q = self.quota
        limited = bool(q.per_tenant or q.per_kind)
        params = {"tenant": tenant_id, "kind": kind, "queue": queue, "params": Jsonb(dict(params)),
                  "key": idempotency_key or None, "parent": parent_job_id, "per_tenant": q.per_tenant,
                  "per_kind": q.per_kind}
        # the quota is a condition of the INSERT itself (it inserts nothing over the limit), not a statement more
        insert = with_event(
            "INSERT INTO jobs (tenant_id, kind, queue, state, params, idempotency_key, enqueued_at, parent_job_id) "
            "SELECT %(tenant)s::uuid, %(kind)s::text, %(queue)s::text, 'QUEUED', %(params)s::jsonb, %(key)s::text, "
            "now(), %(parent)s::uuid " + (f"FROM ({_UNFINISHED}) c WHERE {_UNDER_QUOTA} " if limited else "")
            + "ON CONFLICT (tenant_id, idempotency_key) DO NOTHING RETURNING *", "'QUEUED'", "'queued'")
        if parent_job_id is None and in_transaction is None and not limited:
            # nothing to lock, serialise or write with it: the INSERT is its own transaction (one round trip
            # instead of BEGIN, INSERT, COMMIT)
            row = self._alone(insert, params)
            if row is None:
                with self.pool.connection() as conn:
                    return self._refused(conn, kind, params)
        else:
            with self.pool.connection() as conn:
                if parent_job_id is not None:
                    parent = conn.execute("SELECT cancel_requested, state FROM jobs WHERE id = %s AND tenant_id = %s "
                                          "FOR UPDATE", (parent_job_id, tenant_id)).fetchone()
                    if parent is None:
                        raise NotFound(f"parent job {parent_job_id} not found")
                    if parent["cancel_requested"] or parent["state"] in TERMINAL:
                        raise Cancelled("the parent job was cancelled or has ended: no new child jobs")
                if limited:  # a tenant's submits take turns, so that the INSERT's count cannot overshoot
                    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (str(tenant_id),))
                row = _row(conn.execute(insert, params))
                if row is None:
                    return self._refused(conn, kind, params)
                if in_transaction is not None:
                    in_transaction(conn, row)
        self.enqueue(row["id"], queue)
        return row

    def _refused(self, conn: Connection, kind: str, params: dict) -> dict:
        """Why submit's INSERT inserted nothing: its idempotency key was used before (that job is the answer, even
        over quota), or the tenant is over its quota (ResourceExhausted). A child job's parent is not counted: it
        holds no worker while it waits, and counting it could leave it waiting for ever."""
        existing = conn.execute("SELECT * FROM jobs WHERE tenant_id = %(tenant)s AND idempotency_key = %(key)s",
                                params).fetchone()
        if existing is not None:
            if existing["kind"] != kind:
                raise InvalidArgument("idempotency_key", "already used for a job of another kind")
            return existing
        counts, q = conn.execute(_UNFINISHED, params).fetchone(), self.quota
        if q.per_tenant and counts["total"] >= q.per_tenant:
            raise ResourceExhausted(f"this tenant already has {counts['total']} unfinished jobs (the limit is "
                                    f"{q.per_tenant}): wait for some to finish or cancel them",
                                    retry_after_s=q.retry_after_s, reason="JOB_QUOTA_EXCEEDED")
        raise ResourceExhausted(f"this tenant already has {counts['of_kind']} unfinished {kind} jobs (the limit is "
                                f"{q.per_kind})", retry_after_s=q.retry_after_s, reason="JOB_QUOTA_EXCEEDED")

    def enqueue(self, job_id: str, queue: str, countdown: float = 0.0) -> None:
        """Send the job's task; `countdown` (seconds) delays its delivery (a job waiting for its children)."""
        try:
            self.celery.send_task(RUN_JOB_TASK, args=[str(job_id)], queue=queue, countdown=countdown or None)
        except Exception:  # the broker may be down: mark the row so that the reaper's next pass sends it again
            log.exception("could not enqueue job %s now; the reaper will retry", job_id)
            try:
                with self.pool.connection() as conn:
                    conn.execute("UPDATE jobs SET enqueued_at = to_timestamp(0) WHERE id = %s AND state = 'QUEUED'",
                                 (job_id,))
            except Exception:  # the database is down too: the stale-queued threshold still catches the job
                log.warning("could not mark job %s for the reaper", job_id, exc_info=True)

    def get(self, tenant_id: str, job_id: str, field: str = "job_id") -> dict:
        job_id = parse_uuid(job_id, field)
        with self.pool.connection() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = %s AND tenant_id = %s", (job_id, tenant_id)).fetchone()
        if row is None:
            raise NotFound(f"job {job_id} not found")
        return row

    def list(self, tenant_id: str, *, size: int, token: str = "", states: list[str] | None = None,
             kind: str = "", parent_job_id: str = "") -> tuple[list[dict], str]:
        where, args = ["tenant_id = %s"], [tenant_id]
        if parent_job_id:
            where.append("parent_job_id = %s")
            args.append(parse_uuid(parent_job_id, "parent_job_id"))
        if states:
            where.append("state = ANY(%s)")
            args.append(list(states))
        if kind:
            where.append("kind = %s")
            args.append(kind)
        if token:
            created, last_id = decode_page_token(token)
            where.append("(created_at, id) < (%s, %s)")
            args += [created, last_id]
        with self.pool.connection() as conn:
            rows = conn.execute(f"SELECT * FROM jobs WHERE {' AND '.join(where)} "
                                "ORDER BY created_at DESC, id DESC LIMIT %s", (*args, size + 1)).fetchall()
        next_token = encode_page_token(rows[size - 1]["created_at"], rows[size - 1]["id"]) if len(rows) > size else ""
        return rows[:size], next_token

    def cancel(self, tenant_id: str, job_id: str) -> dict:
        """A queued job becomes CANCELLED at once; a running one is flagged and stops at its next step. Its
        unfinished child jobs (and theirs) are cancelled in the same transaction."""
        job_id = parse_uuid(job_id, "job_id")
        with self.pool.connection() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = %s AND tenant_id = %s FOR UPDATE",
                               (job_id, tenant_id)).fetchone()
            if row is None:
                raise NotFound(f"job {job_id} not found")
            row = self._cancel_locked(conn, row)
            parents = [job_id]
            while parents:  # descendants, parents locked before children (the order submit locks them in)
                children = conn.execute("SELECT * FROM jobs WHERE parent_job_id = ANY(%s::uuid[]) "
                                        "AND state IN ('QUEUED', 'RUNNING') ORDER BY id FOR UPDATE",
                                        ([str(p) for p in parents],)).fetchall()
                for child in children:
                    self._cancel_locked(conn, child, why="parent job cancelled")
                parents = [c["id"] for c in children]
        return row

    def _cancel_locked(self, conn: Connection, row: dict, why: str = "") -> dict:
        job_id = row["id"]
        if row["state"] == "QUEUED":
            message = ("cancelled before start" if row["started_at"] is None else "cancelled while queued") + (
                f" ({why})" if why else "")
            row = _row(conn.execute(with_event(
                "UPDATE jobs SET state = 'CANCELLED', cancel_requested = true, finished_at = now(), "
                "message = %(message)s WHERE id = %(job)s RETURNING *", "'CANCELLED'", "j.message"),
                {"message": message, "job": job_id}))
            self._ended(conn, row)
        elif row["state"] == "RUNNING" and not row["cancel_requested"]:
            row = _row(conn.execute(with_event(
                "UPDATE jobs SET cancel_requested = true WHERE id = %(job)s RETURNING *", "'RUNNING'", "%(message)s"),
                {"message": "cancellation requested" + (f" ({why})" if why else ""), "job": job_id}))
        return row

    def children(self, tenant_id: str, parent_job_id: str, job_ids: list[str]) -> list[dict]:
        """The rows of these child jobs of `parent_job_id` (in the order asked; NotFound for an id that is not
        one of its children), with `models`: the model versions each committed."""
        ids = [parse_uuid(j, "job_ids") for j in job_ids]
        with self.pool.connection() as conn:
            rows = {str(r["id"]): r for r in conn.execute(
                "SELECT * FROM jobs WHERE tenant_id = %s AND parent_job_id = %s AND id = ANY(%s::uuid[])",
                (tenant_id, parent_job_id, ids))}
        missing = [j for j in ids if j not in rows]
        if missing:
            raise NotFound(f"job {missing[0]} is not a child job of {parent_job_id}")
        outputs = self.outputs_of(ids)
        return [{**rows[j], "models": outputs[j][1]} for j in ids]

    def events_after(self, job_id: str, after_seq: int) -> list[dict]:
        with self.pool.connection() as conn:
            return conn.execute("SELECT * FROM job_events WHERE job_id = %s AND seq > %s ORDER BY seq",
                                (job_id, after_seq)).fetchall()

    def outputs(self, job_id: str) -> tuple[list[dict], list[dict]]:
        """Committed artifacts and model versions a job registered (private artifacts, which only jobs may read,
        are not listed: GetArtifact would answer NOT_FOUND to them)."""
        return self.outputs_of([job_id]).get(str(job_id), ([], []))

    def outputs_of(self, job_ids: list) -> dict[str, tuple[list[dict], list[dict]]]:
        """outputs() for a page of jobs, in two queries."""
        out: dict[str, tuple[list[dict], list[dict]]] = {str(j): ([], []) for j in job_ids}
        if not job_ids:
            return out
        ids = [str(j) for j in job_ids]
        with self.pool.connection() as conn:
            for a in conn.execute("SELECT * FROM artifacts WHERE producing_job_id = ANY(%s::uuid[]) AND committed "
                                  "AND coalesce(metadata->>'visibility', '') <> 'private' ORDER BY created_at",
                                  (ids,)):
                out[str(a["producing_job_id"])][0].append(a)
            for m in conn.execute(
                    "SELECT v.producing_job_id, m.name, v.version FROM model_versions v "
                    "JOIN models m ON m.id = v.model_id WHERE v.producing_job_id = ANY(%s::uuid[]) AND v.committed "
                    "ORDER BY v.created_at", (ids,)):
                out[str(m["producing_job_id"])][1].append(m)
        return out

    # ---- the worker side: claim, lease, progress, finish ----
    def claim(self, job_id: str, owner: str, lease_seconds: float) -> dict | None:
        """QUEUED -> RUNNING for this owner with a lease, or None if another delivery got it, it ended, or it was
        cancelled before it started."""
        return self._alone(with_event(
            "UPDATE jobs SET state = 'RUNNING', lease_owner = %(owner)s, "
            "lease_expires_at = now() + make_interval(secs => %(lease)s), attempts = attempts + 1, "
            "started_at = coalesce(started_at, now()) "
            f"WHERE id = %(job)s AND state = 'QUEUED' AND NOT cancel_requested AND {_NO_WAIT_FOR_DISK} RETURNING *",
            "'RUNNING'", "'started (attempt ' || j.attempts || CASE WHEN j.checkpoint_key IS NULL THEN '' "
            "ELSE ', resuming from checkpoint' END || ')'"),
            {"owner": owner, "lease": lease_seconds, "job": job_id})

    def _alone(self, sql: str, params: dict) -> dict | None:
        """One statement in its own transaction (autocommit: a single round trip, no BEGIN or COMMIT); the row it
        changed, or None."""
        with self.pool.connection() as conn:
            conn.autocommit = True
            try:
                return _row(conn.execute(sql, params))
            finally:
                conn.autocommit = False

    def renew(self, job_id: str, owner: str, lease_seconds: float) -> bool | None:
        """Extend the lease: cancel_requested, or None when this owner lost the job."""
        row = self._alone("UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s) "
                          f"WHERE {_OWNED} AND {_NO_WAIT_FOR_DISK} RETURNING cancel_requested",
                          {"lease": lease_seconds, "job": job_id, "owner": owner})
        return None if row is None else bool(row["cancel_requested"])

    @staticmethod
    def lock_owned(conn: Connection, job_id: str, owner: str) -> dict:
        """Lock the job row (until the transaction ends) and check `owner` still runs it; else LeaseLost."""
        row = conn.execute(f"SELECT * FROM jobs WHERE {_OWNED} FOR UPDATE", {"job": job_id, "owner": owner}).fetchone()
        if row is None:
            raise LeaseLost(job_id)
        return row

    @contextmanager
    def owned(self, job_id: str, owner: str) -> Iterator[tuple[Connection, dict]]:
        """A transaction holding the job row of a run that still owns it: what the run writes in it (artifacts,
        staged model versions, tombstones) is committed only if it did own the job."""
        with self.pool.connection() as conn:
            yield conn, self.lock_owned(conn, job_id, owner)

    def progress(self, job_id: str, owner: str, fraction: float, message: str = "",
                 metrics: dict[str, float] | None = None) -> bool:
        """Record progress (an event, NOTIFY); returns cancel_requested, or raises LeaseLost."""
        row = self._owned_alone(job_id, with_event(
            f"UPDATE jobs SET progress = %(progress)s, message = %(message)s WHERE {_OWNED} AND {_NO_WAIT_FOR_DISK} "
            "RETURNING *", "'RUNNING'", "j.message", metrics="%(metrics)s"),
            {"progress": fraction, "message": message, "owner": owner, "metrics": Jsonb(metrics or {})})
        return bool(row["cancel_requested"])

    def _owned_alone(self, job_id: str, sql: str, params: dict) -> dict:
        """A single UPDATE of a run's own job row (its condition includes _OWNED); LeaseLost if the run lost it."""
        row = self._alone(sql, {**params, "job": job_id})
        if row is None:
            raise LeaseLost(job_id)
        return row

    def set_checkpoint(self, job_id: str, owner: str, key: str, sha256: str) -> None:
        self._owned_alone(job_id, f"UPDATE jobs SET checkpoint_key = %(key)s, checkpoint_sha256 = %(sha)s WHERE {_OWNED} "
                          "RETURNING id", {"key": key, "sha": sha256, "owner": owner})

    def checkpoint(self, job_id: str) -> tuple[str, str] | None:
        """(object key, sha256) of the job's last checkpoint, or None."""
        with self.pool.connection() as conn:
            row = conn.execute("SELECT checkpoint_key, checkpoint_sha256 FROM jobs WHERE id = %s",
                               (job_id,)).fetchone()
        if not row or not row["checkpoint_key"]:
            return None
        return row["checkpoint_key"], row["checkpoint_sha256"]

    def finish(self, job_id: str, owner: str, state: str, outputs: JobOutputs, *, progress: float,
               result: dict | None = None, reason: str | None = None, message: str = "") -> None:
        """RUNNING -> a terminal state, in one transaction with the job's outputs (committed when it SUCCEEDED,
        progress 1, else discarded) and with its kind's on_finish hook."""
        if state not in TERMINAL:
            raise ValueError(f"finish needs a terminal state, not {state}")
        progress = 1.0 if state == "SUCCEEDED" else progress
        with self.owned(job_id, owner) as (conn, _):
            # the outputs before the state changes: the kind's on_finish hook (e.g. an unlearning outcome naming
            # its new model version) reads them committed
            if state == "SUCCEEDED":
                outputs.commit_job_outputs(conn, job_id)
            else:
                outputs.discard_job_outputs(conn, job_id)
            row = _row(conn.execute(with_event(
                "UPDATE jobs SET state = %(state)s, result = %(result)s, error_reason = %(reason)s, "
                "error_message = %(error)s, progress = %(progress)s, message = %(message)s, finished_at = now(), "
                "lease_owner = NULL, lease_expires_at = NULL WHERE id = %(job)s RETURNING *", "j.state", "j.message"),
                {"state": state, "result": Jsonb(result) if result is not None else None, "reason": reason,
                 "error": message or None, "progress": progress, "message": message or state.lower(),
                 "job": job_id}))
            self._ended(conn, row)

    def release(self, job_id: str, owner: str, progress: float, message: str, *, waiting: bool = False) -> None:
        """RUNNING -> QUEUED after a transient failure (the caller re-enqueues; the job resumes from its checkpoint).
        `waiting`: the job waits for its child jobs; that run does not count as an attempt (attempts is what
        max_attempts bounds), so a parent may wait any number of times."""
        self._owned_alone(job_id, with_event(
            "UPDATE jobs SET state = 'QUEUED', lease_owner = NULL, lease_expires_at = NULL, enqueued_at = now(), "
            f"attempts = attempts - %(waiting)s WHERE {_OWNED} RETURNING *", "'QUEUED'", "%(message)s",
            progress="%(progress)s"),
            {"waiting": int(waiting), "owner": owner, "message": message, "progress": progress})

    def cancel_unstarted(self, job_id: str) -> bool:
        """A delivery that could not claim the job: if it is QUEUED with a cancellation requested, it ends
        CANCELLED now. True if it did."""
        with self.pool.connection() as conn:
            row = _row(conn.execute(with_event(
                "UPDATE jobs SET state = 'CANCELLED', finished_at = now() WHERE id = %(job)s AND state = 'QUEUED' "
                "AND cancel_requested RETURNING *", "'CANCELLED'", "'cancelled before start'"), {"job": job_id}))
            if row is not None:
                self._ended(conn, row)
        return row is not None

    # ---- the lease reaper ----
    def requeue_stale(self, *, stale_queued_seconds: float) -> list[str]:
        """RUNNING jobs whose lease expired go back to QUEUED (their worker died) and are re-enqueued,
        as are QUEUED jobs whose enqueue is older than stale_queued_seconds (a lost message)."""
        with self.pool.connection() as conn:
            expired = conn.execute(with_event(
                "UPDATE jobs SET state = 'QUEUED', lease_owner = NULL, lease_expires_at = NULL, enqueued_at = now() "
                "WHERE state = 'RUNNING' AND lease_expires_at < now() RETURNING *", "'QUEUED'",
                "'worker lost; re-queued to resume'")).fetchall()
            stale = conn.execute(
                "UPDATE jobs SET enqueued_at = now() WHERE state = 'QUEUED' AND NOT cancel_requested "
                "AND enqueued_at < now() - make_interval(secs => %s) RETURNING id, queue",
                (stale_queued_seconds,)).fetchall()
        for row in [*expired, *stale]:
            self.enqueue(row["id"], row["queue"])
        return [str(r["id"]) for r in expired]
