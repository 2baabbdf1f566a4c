"""The Celery worker: one task that runs any job by id, plus the lease reaper thread."""
from __future__ import annotations

import logging
import os
import threading

from celery import Celery

from services import catalog
from services.common.store import transient
from services.common.queue import RUN_JOB_TASK, make_celery
from services.common.settings import Settings
from workers import runtime
from workers.runner import run_job

log = logging.getLogger(__name__)


def build_app(settings: Settings) -> Celery:
    runtime.configure(settings)
    catalog.load_extra(settings)  # e.g. the tests' own job kinds
    app = make_celery(settings)

    @app.task(name=RUN_JOB_TASK, bind=True, acks_late=True)
    def run_job_task(self, job_id: str) -> str:  # Celery passes the task itself
        return run_job(runtime.get_runtime(), job_id)

    return app


class LeaseReaper(threading.Thread):
    """Re-queues RUNNING jobs whose lease expired (their worker died), whatever the broker does."""

    def __init__(self, settings: Settings):
        super().__init__(daemon=True, name="lease-reaper")
        self.settings, self.stopped = settings, threading.Event()

    def run(self) -> None:
        interval = self.settings.jobs.reaper_interval_seconds
        while not self.stopped.wait(interval):
            try:
                requeued = runtime.get_runtime().jobs.requeue_stale(
                    stale_queued_seconds=max(60.0, 10 * self.settings.jobs.lease_seconds))
                if requeued:
                    log.warning("re-queued %d job(s) whose worker was lost: %s", len(requeued), requeued)
            except Exception as exc:
                if not transient(exc):
                    raise
                log.warning("lease reaper: database or broker unavailable", exc_info=True)


def start_worker(settings: Settings, queues: list[str], concurrency: int = 1, pool: str = "prefork") -> None:
    """Blocks running a Celery worker on the given queues, with the lease reaper beside it."""
    app = build_app(settings)
    reaper = LeaseReaper(settings)
    reaper.start()
    app.worker_main(["worker", f"--queues={','.join(queues)}", f"--concurrency={concurrency}", f"--pool={pool}",
                     f"--loglevel={settings.log_level}", "--without-gossip", "--without-mingle",
                     "--without-heartbeat", "-n", f"praxon-{os.getpid()}@%h"])
