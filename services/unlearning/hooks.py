"""What unlearning does when its jobs end (JobKind.on_finish, called by the job store inside the transaction of the
job's terminal transition): an unlearn job writes its record's outcome, an audit job its audit row. Written once: a job
reaches a terminal state exactly once (the store's conditional transitions), and the primary keys make a second
insert a no-op. Nothing here may fail the finishing transaction on the job's own data: ids from the job's JSON are
checked before they are used (a hook that raises rolls the transition back)."""
from __future__ import annotations

import re
from typing import Any

from psycopg import Connection

UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _uuid_text(doc: Any, key: str) -> str | None:
    """doc->>key when it is a UUID's text, else None."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, str) and UUID_RE.fullmatch(value) else None


def unlearning_finished(conn: Connection, job: dict) -> None:
    """The record's outcome: the job's end state, result and error; the new model version when it succeeded and
    the version it names is one of the tenant's committed versions (committed in this same transaction)."""
    new_version = None
    named = _uuid_text(job["result"], "model_version_id") if job["state"] == "SUCCEEDED" else None
    if named is not None:
        row = conn.execute("SELECT id FROM model_versions WHERE id = %s AND tenant_id = %s AND committed",
                           (named, job["tenant_id"])).fetchone()
        new_version = row["id"] if row else None
    conn.execute(
        "INSERT INTO unlearning_outcomes (record_id, job_id, state, result, new_model_version_id, error_reason, "
        "error_message, finished_at) "
        "SELECT r.id, j.id, j.state, j.result, %s, j.error_reason, j.error_message, coalesce(j.finished_at, now()) "
        "FROM jobs j JOIN unlearning_records r ON r.job_id = j.id WHERE j.id = %s "
        "ON CONFLICT DO NOTHING", (new_version, job["id"]))


def audit_finished(conn: Connection, job: dict) -> None:
    """The audit of the record the job's params name (one of the tenant's records), with the job's end state."""
    record_id = _uuid_text(job["params"], "record_id")
    if record_id is None:
        return
    conn.execute(
        "INSERT INTO unlearning_audits (job_id, record_id, state, result, error_reason, error_message, finished_at) "
        "SELECT j.id, r.id, j.state, j.result, j.error_reason, j.error_message, coalesce(j.finished_at, now()) "
        "FROM jobs j JOIN unlearning_records r ON r.id = %s AND r.tenant_id = j.tenant_id WHERE j.id = %s "
        "ON CONFLICT DO NOTHING", (record_id, job["id"]))
