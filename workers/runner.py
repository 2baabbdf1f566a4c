"""Runs one job exactly once in effect: claim the row, hold a lease by heartbeat, give the job a context
(progress, cancellation, checkpoints, artifacts, models), and finish it in one transaction. A thin wrapper over
JobStore (services/common/jobs.py), which holds every statement on the job row; here: the retries around them,
the lease heartbeats, and what each outcome of the job function means for the row."""
from __future__ import annotations

from datetime import datetime, timezone
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable

from services import catalog
from services.common.errors import Cancelled, FailedPrecondition, PraxonError, ResourceExhausted
from services.common.store import transient
from services.common.jobcontext import CHILD_POLL_SECONDS, ChildJobsPending, ModelVersionInfo
from services.common.spec import JobKind, resolve
from services.common.jobs import TERMINAL, LeaseLost, typed_params
from services.common.state import dumps_state, loads_state
from services.common.store import retry
from workers.runtime import Runtime

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
__all__ = ["LeaseLost", "WorkerJobContext", "run_job"]  # LeaseLost re-exported from jobs


def _db_retry(fn: Callable[[], Any], what: str) -> Any:
    return retry(fn, what=what, transient=transient, attempts=10, base_delay=0.25)


def job_kind(kind: str) -> JobKind:
    """The kind as the catalog's specs declare it (FailedPrecondition if this worker hosts no such kind)."""
    spec = catalog.job_kind(kind)
    if spec is None:
        raise FailedPrecondition(f"job kind {kind} is not available on this worker", reason="JOB_KIND_UNAVAILABLE")
    return spec


class WorkerJobContext:
    """The JobContext a running job sees (services/common/jobcontext.py), backed by PostgreSQL and S3."""

    def __init__(self, rt: Runtime, job: dict, owner: str):
        self.rt = rt
        self.job_id = str(job["id"])
        self.tenant_id = str(job["tenant_id"])
        self.kind = job["kind"]
        self.params = dict(job["params"])
        self.settings = rt.settings
        self.owner = owner
        self.lease_lost = False
        self.cancel_requested = bool(job["cancel_requested"])
        self.last_progress = float(job["progress"])
        self.created_at = job.get("created_at") or datetime.now(timezone.utc)

    # -- lease --
    def renew_lease(self) -> None:
        cancel = _db_retry(lambda: self.rt.jobs.renew(self.job_id, self.owner, self.rt.settings.jobs.lease_seconds),
                           "renew lease")
        if cancel is None:
            self.lease_lost = True
        else:
            self.cancel_requested = cancel

    @contextmanager
    def _owned(self):
        """A transaction on the job row while this run still owns it (else LeaseLost, remembered)."""
        try:
            with self.rt.jobs.owned(self.job_id, self.owner) as (conn, _):
                yield conn
        except LeaseLost:
            self.lease_lost = True
            raise

    # -- JobContext --
    def progress(self, fraction: float, message: str = "", **metrics: float) -> None:
        fraction = min(1.0, max(0.0, float(fraction)))
        clean = {k: float(v) for k, v in metrics.items()}
        self.cancel_requested = self._write(lambda: self.rt.jobs.progress(self.job_id, self.owner, fraction, message,
                                                                          clean), "progress")
        self.last_progress = fraction

    def _write(self, fn: Callable[[], Any], what: str) -> Any:
        try:
            return _db_retry(fn, what)
        except LeaseLost:
            self.lease_lost = True
            raise

    def check_cancelled(self) -> None:
        if self.lease_lost:
            raise LeaseLost(self.job_id)
        if self.cancel_requested:
            raise Cancelled("job cancelled")

    def save_checkpoint(self, state: Any) -> None:
        self.check_cancelled()
        blob = dumps_state(state)
        key, digest = self.rt.store.put_blob(self.tenant_id, blob, "application/vnd.safetensors")
        self._write(lambda: self.rt.jobs.set_checkpoint(self.job_id, self.owner, key, digest), "save checkpoint")

    def load_checkpoint(self) -> Any | None:
        found = self.rt.jobs.checkpoint(self.job_id)
        return None if found is None else loads_state(self.rt.store.get_bytes(*found))

    def read_artifact(self, artifact_id: str) -> bytes:
        return self.rt.registry.read_artifact(self.tenant_id, artifact_id, job_id=self.job_id)

    def write_artifact(self, name: str, data: bytes, content_type: str,
                       metadata: dict[str, Any] | None = None) -> str:
        def write() -> str:
            with self._owned() as conn:
                return str(self.rt.registry.put_artifact(conn, self.tenant_id, name, data, content_type,
                                                         metadata=metadata, job_id=self.job_id)["id"])
        return _db_retry(write, "write artifact")

    def register_model(self, name: str, tensors: dict[str, torch.Tensor], *, kind: str,
                       config: dict[str, Any], metrics: dict[str, float] | None = None,
                       dataset_artifact_id: str | None = None,
                       parent_version_ids: list[str] | None = None) -> ModelVersionInfo:
        def write() -> ModelVersionInfo:
            with self._owned() as conn:
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
            with self._owned() as conn:
                self.rt.registry.stage_tombstones(conn, self.tenant_id, self.job_id, dataset_artifact_id,
                                                  [str(r) for r in record_ids])
        _db_retry(write, "forget records")

    def start_child(self, kind: str, params: dict[str, Any], key: str) -> str:
        self.check_cancelled()
        # the key is this job's id + the caller's key: a resumed parent finds the child it started before
        idempotency_key = f"child:{self.job_id}:{key}"
        try:
            row = _db_retry(lambda: self.rt.jobs.submit(self.tenant_id, kind, params, idempotency_key,
                                                        parent_job_id=self.job_id), "start a child job")
        except ResourceExhausted as exc:  # the tenant's job quota: wait (without a worker) and try again
            raise ChildJobsPending(f"waiting to start child job {key!r}: {exc.message}",
                                   retry_after_s=max(exc.retry_after_s, 1.0)) from None
        return str(row["id"])

    def wait_for_children(self, job_ids: list[str]) -> list[dict[str, Any]]:
        self.check_cancelled()
        rows = _db_retry(lambda: self.rt.jobs.children(self.tenant_id, self.job_id, job_ids), "read child jobs")
        pending = sum(r["state"] not in TERMINAL for r in rows)
        if pending:
            done = len(rows) - pending
            self.progress(max(self.last_progress, 0.9 * done / len(rows)), f"{done}/{len(rows)} child jobs ended")
            # poll less often the longer the wait (2 s .. 30 s), so an hours-long sweep is not thousands of re-runs
            waited = (datetime.now(timezone.utc) - self.created_at).total_seconds()
            raise ChildJobsPending(f"waiting for {pending} of {len(rows)} child jobs",
                                   retry_after_s=min(30.0, max(CHILD_POLL_SECONDS, waited / 20)))
        return [{"job_id": str(r["id"]), "kind": r["kind"], "state": r["state"], "result": r["result"],
                 "error_reason": r["error_reason"], "error_message": r["error_message"],
                 "seconds": (r["finished_at"] - r["started_at"]).total_seconds() if r["started_at"] else None,
                 "models": [{"name": m["name"], "version": m["version"]} for m in r["models"]]} for r in rows]


class Heartbeats:
    """Renews the lease of every job this process runs, each every `interval` seconds, from one daemon thread
    started on first use (a thread per job cost a thread start on every job). Per process: a forked worker child
    starts its own."""

    def __init__(self):
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._due: dict[str, tuple[WorkerJobContext, float, float]] = {}  # job id -> (context, next at, interval)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, ctx: WorkerJobContext, interval: float) -> None:
        with self._lock:
            self._due[ctx.job_id] = (ctx, time.monotonic() + interval, interval)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="lease-heartbeats")
                self._thread.start()
        self._wake.set()

    def unwatch(self, ctx: WorkerJobContext) -> None:
        with self._lock:
            if self._due.get(ctx.job_id, (None,))[0] is ctx:
                del self._due[ctx.job_id]

    def _run(self) -> None:
        while True:
            self._wake.clear()  # before reading the table: a watch() from here on wakes the wait below
            with self._lock:
                now = time.monotonic()
                due = [(job_id, ctx, interval) for job_id, (ctx, at, interval) in self._due.items() if at <= now]
                for job_id, ctx, interval in due:
                    self._due[job_id] = (ctx, now + interval, interval)
                wait = min((at for _, at, _ in self._due.values()), default=now + 60.0) - now
            for job_id, ctx, _ in due:  # outside the lock: a renewal waits on the database
                try:
                    ctx.renew_lease()
                except Exception as exc:
                    if transient(exc):  # the database is away; the lease may lapse and the reaper decides
                        log.warning("lease renewal failed for job %s", job_id, exc_info=True)
                    else:
                        log.exception("lease renewal crashed for job %s", job_id)
                if ctx.lease_lost:
                    self.unwatch(ctx)
            self._wake.wait(max(0.0, wait))


HEARTBEATS = Heartbeats()


def _finish(rt: Runtime, ctx: WorkerJobContext, state: str, *, result: dict | None = None,
            reason: str | None = None, message: str = "") -> None:
    _db_retry(lambda: rt.jobs.finish(ctx.job_id, ctx.owner, state, rt.registry, progress=ctx.last_progress,
                                     result=result, reason=reason, message=message), f"finish job as {state}")


def run_job(rt: Runtime, job_id: str) -> str:
    """Entry point of the Celery task. Returns what happened, for logs and tests."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    job = _db_retry(lambda: rt.jobs.claim(job_id, owner, rt.settings.jobs.lease_seconds), "claim job")
    if job is None:
        _db_retry(lambda: rt.jobs.cancel_unstarted(job_id), "cancel an unstarted job")
        return "skipped"
    ctx = WorkerJobContext(rt, job, owner)
    HEARTBEATS.watch(ctx, rt.settings.jobs.heartbeat_seconds)
    try:
        kind = job_kind(job["kind"])
        # the params submit validated, as the typed object the job receives (the kind's model; a dict without one)
        ctx.params = typed_params(kind, ctx.params, prefix="params.")
        result = resolve(kind.target)(ctx)
        ctx.check_cancelled()  # a cancel that arrived during the last step still wins
        _finish(rt, ctx, "SUCCEEDED", result=result or {}, message="succeeded")
        return "succeeded"
    except LeaseLost:
        log.warning("job %s: lease lost, leaving it to its new owner", job_id)
        return "lease-lost"
    except ChildJobsPending as wait:  # give the worker back; the job runs again (from the start) a bit later
        why, countdown = wait.message, wait.retry_after_s
        try:
            _db_retry(lambda: rt.jobs.release(job_id, owner, ctx.last_progress, why, waiting=True),
                      "release a waiting job")
        except LeaseLost:
            return "lease-lost"
        rt.jobs.enqueue(job_id, job["queue"], countdown=countdown)
        return "waiting"
    except Cancelled:
        _finish(rt, ctx, "CANCELLED", message="cancelled")
        return "cancelled"
    except PraxonError as exc:
        _finish(rt, ctx, "FAILED", reason=exc.reason, message=exc.message)
        return "failed"
    except Exception as exc:  # noqa: BLE001 - a transient failure re-queues; anything else is a bug in the job
        if transient(exc):
            if job["attempts"] < rt.settings.jobs.max_attempts:
                log.warning("job %s: transient failure (%s); re-queued", job_id, exc)
                why = f"transient failure ({type(exc).__name__}); will resume"
                _db_retry(lambda: rt.jobs.release(job_id, owner, ctx.last_progress, why), "release job")
                rt.jobs.enqueue(job_id, job["queue"])
                return "requeued"
            _finish(rt, ctx, "FAILED", reason="TRANSIENT_ERRORS_EXHAUSTED", message=str(exc))
            return "failed"
        # record it structured, the traceback in the log
        log.error("job %s crashed:\n%s", job_id, traceback.format_exc())
        _finish(rt, ctx, "FAILED", reason="INTERNAL", message=f"{type(exc).__name__}: {exc}")
        return "failed"
    finally:
        HEARTBEATS.unwatch(ctx)

