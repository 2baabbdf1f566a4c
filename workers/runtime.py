"""Per-process resources of a worker, created lazily after fork (a DB pool must not cross a fork)."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from services.common.db import create_pool
from services.common.jobs import JobQuota, JobStore
from services.common.queue import make_celery
from services.common.registry import Registry
from services.common.settings import Settings, apply_torch_threads
from services.common.store import ArtifactStore


@dataclass
class Runtime:
    settings: Settings
    pool: ConnectionPool
    jobs: JobStore
    registry: Registry
    store: ArtifactStore


_settings: Settings | None = None
_runtime: Runtime | None = None
_pid: int | None = None
_lock = threading.Lock()
# Runtimes inherited across a fork are kept referenced, never closed: closing them in the child would
# terminate the parent's connections over the shared sockets.
_inherited: list[Runtime] = []


def _after_fork_in_child() -> None:
    # A fork can happen while another thread (the lease reaper) holds the lock: start the child with a new one.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def configure(settings: Settings) -> None:
    global _settings
    _settings = settings


def get_runtime() -> Runtime:
    global _runtime, _pid
    with _lock:
        if _runtime is None or _pid != os.getpid():
            if _runtime is not None:
                _inherited.append(_runtime)
            settings = _settings or Settings()
            apply_torch_threads(settings)  # in each job process (after the fork), before its first model runs
            pool = create_pool(settings, max_size=4)
            store = ArtifactStore(settings)
            # the tenants' job quotas also bound the child jobs a job starts (JobContext.start_child)
            quota = JobQuota(settings.jobs.max_active_per_tenant, settings.jobs.max_active_per_tenant_kind)
            _runtime = Runtime(settings, pool, JobStore(pool, make_celery(settings), quota), Registry(pool, store),
                               store)
            _pid = os.getpid()
        return _runtime
