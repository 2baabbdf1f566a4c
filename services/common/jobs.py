"""The job table: the single source of truth for every long job (see ARCHITECTURE, "The job lifecycle").
Services submit and follow jobs here; workers claim, heartbeat and finish them here."""
from __future__ import annotations

import base64
import binascii
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from celery import Celery
from psycopg import Connection
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.common.jobkinds import JOB_KINDS
from services.common.queue import RUN_JOB_TASK

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


def add_event(conn: Connection, job_id: str, state: str, progress: float, message: str = "",
              metrics: dict[str, float] | None = None) -> int:
    """Append to the job's event log (the caller holds the job row lock) and notify watchers at commit."""
    row = conn.execute(
        "INSERT INTO job_events (job_id, seq, state, progress, message, metrics) "
        "SELECT %s, coalesce(max(seq), 0) + 1, %s, %s, %s, %s FROM job_events WHERE job_id = %s RETURNING seq",
        (job_id, state, progress, message, Jsonb(metrics or {}), job_id)).fetchone()
    conn.execute("SELECT pg_notify(%s, %s)", (EVENTS_CHANNEL, str(job_id)))
    return row["seq"]


@dataclass
class JobStore:
    pool: ConnectionPool
    celery: Celery

    # ---- producers (services) ----
    def submit(self, tenant_id: str, kind: str, params: dict[str, Any], idempotency_key: str = "",
               in_transaction: Callable[[Connection, dict], None] | None = None) -> dict:
        """Insert the job (QUEUED) and commit, then enqueue. The same idempotency key returns the same job.
        `in_transaction(conn, job_row)` runs inside the inserting transaction (only for a new job), so rows a
        service keeps about the request (e.g. an audit record) exist if and only if the job does."""
        if kind not in JOB_KINDS:  # the kind is the service's choice, not the caller's input
            raise FailedPrecondition(f"job kind {kind} is not available in this deployment",
                                     reason="JOB_KIND_UNAVAILABLE")
        if len(idempotency_key) > 200 or not idempotency_key.isprintable():
            raise InvalidArgument("idempotency_key", "at most 200 printable characters")
        queue = JOB_KINDS[kind].queue
        with self.pool.connection() as conn:
            row = conn.execute(
                "INSERT INTO jobs (tenant_id, kind, queue, state, params, idempotency_key, enqueued_at) "
                "VALUES (%s, %s, %s, 'QUEUED', %s, %s, now()) "
                "ON CONFLICT (tenant_id, idempotency_key) DO NOTHING RETURNING *",
                (tenant_id, kind, queue, Jsonb(params), idempotency_key or None)).fetchone()
            if row is None:  # the key was used before: that job is the answer
                existing = conn.execute("SELECT * FROM jobs WHERE tenant_id = %s AND idempotency_key = %s",
                                        (tenant_id, idempotency_key)).fetchone()
                if existing["kind"] != kind:
                    raise InvalidArgument("idempotency_key", "already used for a job of another kind")
                return existing
            add_event(conn, row["id"], "QUEUED", 0.0, "queued")
            if in_transaction is not None:
                in_transaction(conn, row)
        self.enqueue(row["id"], queue)
        return row

    def enqueue(self, job_id: str, queue: str) -> None:
        try:
            self.celery.send_task(RUN_JOB_TASK, args=[str(job_id)], queue=queue)
        except Exception:  # noqa: BLE001 - the broker may be down; the reaper re-enqueues QUEUED jobs later
            log.exception("could not enqueue job %s now; the reaper will retry", job_id)

    def get(self, tenant_id: str, job_id: str, field: str = "job_id") -> dict:
        job_id = parse_uuid(job_id, field)
        with self.pool.connection() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = %s AND tenant_id = %s", (job_id, tenant_id)).fetchone()
        if row is None:
            raise NotFound(f"job {job_id} not found")
        return row

    def list(self, tenant_id: str, *, size: int, token: str = "", states: list[str] | None = None,
             kind: str = "") -> tuple[list[dict], str]:
        where, args = ["tenant_id = %s"], [tenant_id]
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
        """A queued job becomes CANCELLED at once; a running one is flagged and stops at its next step."""
        job_id = parse_uuid(job_id, "job_id")
        with self.pool.connection() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = %s AND tenant_id = %s FOR UPDATE",
                               (job_id, tenant_id)).fetchone()
            if row is None:
                raise NotFound(f"job {job_id} not found")
            if row["state"] == "QUEUED":
                row = conn.execute("UPDATE jobs SET state = 'CANCELLED', cancel_requested = true, "
                                   "finished_at = now(), message = 'cancelled before start' "
                                   "WHERE id = %s RETURNING *", (job_id,)).fetchone()
                add_event(conn, job_id, "CANCELLED", row["progress"], "cancelled before start")
            elif row["state"] == "RUNNING" and not row["cancel_requested"]:
                row = conn.execute("UPDATE jobs SET cancel_requested = true WHERE id = %s RETURNING *",
                                   (job_id,)).fetchone()
                add_event(conn, job_id, "RUNNING", row["progress"], "cancellation requested")
        return row

    def events_after(self, job_id: str, after_seq: int) -> list[dict]:
        with self.pool.connection() as conn:
            return conn.execute("SELECT * FROM job_events WHERE job_id = %s AND seq > %s ORDER BY seq",
                                (job_id, after_seq)).fetchall()

    def outputs(self, job_id: str) -> tuple[list[dict], list[dict]]:
        """Committed artifacts and model versions a job registered."""
        with self.pool.connection() as conn:
            arts = conn.execute("SELECT * FROM artifacts WHERE producing_job_id = %s AND committed "
                                "ORDER BY created_at", (job_id,)).fetchall()
            models = conn.execute(
                "SELECT m.name, v.version FROM model_versions v JOIN models m ON m.id = v.model_id "
                "WHERE v.producing_job_id = %s AND v.committed ORDER BY v.created_at", (job_id,)).fetchall()
        return arts, models

    # ---- the lease reaper ----
    def requeue_stale(self, *, stale_queued_seconds: float) -> list[str]:
        """RUNNING jobs whose lease expired go back to QUEUED (their worker died) and are re-enqueued,
        as are QUEUED jobs whose enqueue is older than stale_queued_seconds (a lost message)."""
        with self.pool.connection() as conn:
            expired = conn.execute(
                "UPDATE jobs SET state = 'QUEUED', lease_owner = NULL, lease_expires_at = NULL, enqueued_at = now() "
                "WHERE state = 'RUNNING' AND lease_expires_at < now() RETURNING id, queue, progress").fetchall()
            for row in expired:
                add_event(conn, row["id"], "QUEUED", row["progress"], "worker lost; re-queued to resume")
            stale = conn.execute(
                "UPDATE jobs SET enqueued_at = now() WHERE state = 'QUEUED' AND NOT cancel_requested "
                "AND enqueued_at < now() - make_interval(secs => %s) RETURNING id, queue",
                (stale_queued_seconds,)).fetchall()
        for row in [*expired, *stale]:
            self.enqueue(row["id"], row["queue"])
        return [str(r["id"]) for r in expired]
