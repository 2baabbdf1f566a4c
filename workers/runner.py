"""Runs one job exactly once in effect: claim the row, hold a lease by heartbeat, give the job a context
(progress, cancellation, checkpoints, artifacts, models), and finish it in one transaction."""
from __future__ import annotations

import logging
import os
import socket
import threading
import traceback
import uuid
from typing import Any, Callable

import torch
from psycopg.types.json import Jsonb

from services.common.db import TRANSIENT_DB_ERRORS
from services.common.errors import Cancelled, PraxonError
from services.common.jobcontext import ModelVersionInfo
from services.common.jobkinds import JOB_KINDS
from services.common.spec import resolve
from services.common.jobs import add_event
from services.common.state import dumps_state, loads_state
from services.common.store import TRANSIENT_STORE_ERRORS, retry
from workers.runtime import Runtime

log = logging.getLogger(__name__)
TRANSIENT = TRANSIENT_DB_ERRORS + TRANSIENT_STORE_ERRORS


class LeaseLost(Exception):
    """Another worker (via the reaper) owns the job now; this run must stop without writing."""


def _db_retry(fn: Callable[[], Any], what: str) -> Any:
    return retry(fn, what=what, transient=TRANSIENT, attempts=10, base_delay=0.25)


def resolve_target(kind: str) -> Callable[[Any], dict | None]:
    return resolve(JOB_KINDS[kind].target)


class WorkerJobContext:
    """The JobContext a running job sees (services/common/jobcontext.py), backed by PostgreSQL and S3."""

    def __init__(self, rt: Runtime, job: dict, owner: str):
        self.rt = rt
        self.job_id = str(job["id"])
        self.tenant_id = str(job["tenant_id"])
        self.kind = job["kind"]
        self.params = dict(job["params"])
        self.owner = owner
        self.lease_lost = False
        self.cancel_requested = bool(job["cancel_requested"])
        self.last_progress = float(job["progress"])

    # -- lease --
    def renew_lease(self) -> None:
        def renew() -> dict | None:
            with self.rt.pool.connection() as conn:
                return conn.execute(
                    "UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %s) "
                    "WHERE id = %s AND lease_owner = %s AND state = 'RUNNING' RETURNING cancel_requested",
                    (self.rt.settings.jobs.lease_seconds, self.job_id, self.owner)).fetchone()
        row = _db_retry(renew, "renew lease")
        if row is None:
            self.lease_lost = True
        else:
            self.cancel_requested = bool(row["cancel_requested"])

    def _owned(self, conn) -> dict:
        """Lock the job row and check this run still owns it."""
        row = conn.execute("SELECT * FROM jobs WHERE id = %s FOR UPDATE", (self.job_id,)).fetchone()
        if row is None or row["lease_owner"] != self.owner or row["state"] != "RUNNING":
            self.lease_lost = True
            raise LeaseLost(self.job_id)
        return row

    # -- JobContext --
    def progress(self, fraction: float, message: str = "", **metrics: float) -> None:
        fraction = min(1.0, max(0.0, float(fraction)))
        clean = {k: float(v) for k, v in metrics.items()}

        def write() -> None:
            with self.rt.pool.connection() as conn:
                row = self._owned(conn)
                conn.execute("UPDATE jobs SET progress = %s, message = %s WHERE id = %s",
                             (fraction, message, self.job_id))
                add_event(conn, self.job_id, "RUNNING", fraction, message, clean)
                self.cancel_requested = bool(row["cancel_requested"])
        _db_retry(write, "progress")
        self.last_progress = fraction

    def check_cancelled(self) -> None:
        if self.lease_lost:
            raise LeaseLost(self.job_id)
        if self.cancel_requested:
            raise Cancelled("job cancelled")

    def save_checkpoint(self, state: Any) -> None:
        self.check_cancelled()
        blob = dumps_state(state)
        key, digest = self.rt.store.put_blob(self.tenant_id, blob, "application/vnd.safetensors")

        def write() -> None:
            with self.rt.pool.connection() as conn:
                self._owned(conn)
                conn.execute("UPDATE jobs SET checkpoint_key = %s, checkpoint_sha256 = %s WHERE id = %s",
                             (key, digest, self.job_id))
        _db_retry(write, "save checkpoint")

    def load_checkpoint(self) -> Any | None:
        with self.rt.pool.connection() as conn:
            row = conn.execute("SELECT checkpoint_key, checkpoint_sha256 FROM jobs WHERE id = %s",
                               (self.job_id,)).fetchone()
        if not row or not row["checkpoint_key"]:
            return None
        return loads_state(self.rt.store.get_bytes(row["checkpoint_key"], row["checkpoint_sha256"]))

    def read_artifact(self, artifact_id: str) -> bytes:
        return self.rt.registry.read_artifact(self.tenant_id, artifact_id, job_id=self.job_id)

    def write_artifact(self, name: str, data: bytes, content_type: str,
                       metadata: dict[str, Any] | None = None) -> str:
        def write() -> str:
            with self.rt.pool.connection() as conn:
                self._owned(conn)
                return str(self.rt.registry.put_artifact(conn, self.tenant_id, name, data, content_type,
                                                         metadata=metadata, job_id=self.job_id)["id"])
        return _db_retry(write, "write artifact")

    def register_model(self, name: str, tensors: dict[str, torch.Tensor], *, kind: str,
                       config: dict[str, Any], metrics: dict[str, float] | None = None,
                       dataset_artifact_id: str | None = None,
                       parent_version_ids: list[str] | None = None) -> ModelVersionInfo:
        def write() -> ModelVersionInfo:
            with self.rt.pool.connection() as conn:
                self._owned(conn)
                row = self.rt.registry.stage_model(conn, self.tenant_id, self.job_id, name, tensors, kind=kind,
                                                   config=config, metrics=metrics,
                                                   dataset_artifact_id=dataset_artifact_id,
                                                   parent_version_ids=list(parent_version_ids or []))
                return ModelVersionInfo(name=name, version=None, model_version_id=str(row["id"]))
        return _db_retry(write, "register model")

    def load_model(self, model_version_id: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        version = self.rt.registry.version_by_id(self.tenant_id, model_version_id)
        return self.rt.registry.load_weights(self.tenant_id, version)

    def forgotten_records(self, dataset_artifact_id: str) -> set[str]:
        return self.rt.registry.tombstones(self.tenant_id, dataset_artifact_id)

    def forget_records(self, dataset_artifact_id: str, record_ids: list[str]) -> None:
        def write() -> None:
            with self.rt.pool.connection() as conn:
                self._owned(conn)
                self.rt.registry.stage_tombstones(conn, self.tenant_id, self.job_id, dataset_artifact_id,
                                                  [str(r) for r in record_ids])
        _db_retry(write, "forget records")


class Heartbeat(threading.Thread):
    def __init__(self, ctx: WorkerJobContext, interval: float):
        super().__init__(daemon=True, name=f"lease-{ctx.job_id[:8]}")
        self.ctx, self.interval, self.stopped = ctx, interval, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.ctx.renew_lease()
            except TRANSIENT:  # the database is away; the lease may lapse and the reaper decides
                log.warning("lease renewal failed for job %s", self.ctx.job_id, exc_info=True)
            if self.ctx.lease_lost:
                return


def claim(rt: Runtime, job_id: str, owner: str) -> dict | None:
    """QUEUED -> RUNNING for this owner, or None if another delivery got it / it ended / was cancelled."""
    with rt.pool.connection() as conn:
        job = conn.execute(
            "UPDATE jobs SET state = 'RUNNING', lease_owner = %s, "
            "lease_expires_at = now() + make_interval(secs => %s), attempts = attempts + 1, "
            "started_at = coalesce(started_at, now()) "
            "WHERE id = %s AND state = 'QUEUED' AND NOT cancel_requested RETURNING *",
            (owner, rt.settings.jobs.lease_seconds, job_id)).fetchone()
        if job is not None:
            resumed = job["checkpoint_key"] is not None
            add_event(conn, job_id, "RUNNING", job["progress"],
                      f"started (attempt {job['attempts']}{', resuming from checkpoint' if resumed else ''})")
        return job


def _finish(rt: Runtime, ctx: WorkerJobContext, state: str, *, result: dict | None = None,
            reason: str | None = None, message: str = "") -> None:
    def write() -> None:
        with rt.pool.connection() as conn:
            ctx._owned(conn)
            if state == "SUCCEEDED":
                rt.registry.commit_job_outputs(conn, ctx.job_id)
            else:
                rt.registry.discard_job_outputs(conn, ctx.job_id)
            progress = 1.0 if state == "SUCCEEDED" else ctx.last_progress
            conn.execute("UPDATE jobs SET state = %s, result = %s, error_reason = %s, error_message = %s, "
                         "progress = %s, message = %s, finished_at = now(), lease_owner = NULL, "
                         "lease_expires_at = NULL WHERE id = %s",
                         (state, Jsonb(result) if result is not None else None, reason, message or None, progress,
                          message or state.lower(), ctx.job_id))
            add_event(conn, ctx.job_id, state, progress, message or state.lower())
    _db_retry(write, f"finish job as {state}")


def _release(rt: Runtime, ctx: WorkerJobContext, message: str) -> None:
    """Give a job back to the queue after a transient failure (it resumes from its checkpoint)."""
    def write() -> None:
        with rt.pool.connection() as conn:
            ctx._owned(conn)
            conn.execute("UPDATE jobs SET state = 'QUEUED', lease_owner = NULL, lease_expires_at = NULL, "
                         "enqueued_at = now() WHERE id = %s", (ctx.job_id,))
            add_event(conn, ctx.job_id, "QUEUED", ctx.last_progress, message)
    _db_retry(write, "release job")


def run_job(rt: Runtime, job_id: str) -> str:
    """Entry point of the Celery task. Returns what happened, for logs and tests."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    job = _db_retry(lambda: claim(rt, job_id, owner), "claim job")
    if job is None:
        _cancel_if_requested_before_start(rt, job_id)
        return "skipped"
    ctx = WorkerJobContext(rt, job, owner)
    beat = Heartbeat(ctx, rt.settings.jobs.heartbeat_seconds)
    beat.start()
    try:
        result = resolve_target(job["kind"])(ctx)
        ctx.check_cancelled()  # a cancel that arrived during the last step still wins
        _finish(rt, ctx, "SUCCEEDED", result=result or {}, message="succeeded")
        return "succeeded"
    except LeaseLost:
        log.warning("job %s: lease lost, leaving it to its new owner", job_id)
        return "lease-lost"
    except Cancelled:
        _finish(rt, ctx, "CANCELLED", message="cancelled")
        return "cancelled"
    except PraxonError as exc:
        _finish(rt, ctx, "FAILED", reason=exc.reason, message=exc.message)
        return "failed"
    except TRANSIENT as exc:
        if job["attempts"] < rt.settings.jobs.max_attempts:
            log.warning("job %s: transient failure (%s); re-queued", job_id, exc)
            _release(rt, ctx, f"transient failure ({type(exc).__name__}); will resume")
            rt.jobs.enqueue(job_id, job["queue"])
            return "requeued"
        _finish(rt, ctx, "FAILED", reason="TRANSIENT_ERRORS_EXHAUSTED", message=str(exc))
        return "failed"
    except Exception as exc:  # noqa: BLE001 - a bug in the job: record it structured, traceback in the log
        log.error("job %s crashed:\n%s", job_id, traceback.format_exc())
        _finish(rt, ctx, "FAILED", reason="INTERNAL", message=f"{type(exc).__name__}: {exc}")
        return "failed"
    finally:
        beat.stopped.set()


def _cancel_if_requested_before_start(rt: Runtime, job_id: str) -> None:
    with rt.pool.connection() as conn:
        row = conn.execute("UPDATE jobs SET state = 'CANCELLED', finished_at = now() WHERE id = %s "
                           "AND state = 'QUEUED' AND cancel_requested RETURNING progress", (job_id,)).fetchone()
        if row is not None:
            add_event(conn, job_id, "CANCELLED", row["progress"], "cancelled before start")
