"""Real pieces for tests: a fresh database on the machine's PostgreSQL, a `weed mini` S3 server, the gRPC
platform on loopback (in a thread with its own event loop), and `praxon worker` subprocesses."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import grpc
import psycopg

from services.common import db
from services.common.embedded import spawn
from services.common.settings import S3Settings, Settings

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get("PRAXON_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("PRAXON_TEST_REDIS", "redis://127.0.0.1:6379")
RABBIT_URL = os.environ.get("PRAXON_TEST_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672//")


def free_port_base(span: int = 6) -> int:
    """A base port with base .. base+span and their +10000 gRPC twins free (weed mini needs them). All of them lie
    below the kernel's ephemeral range: a port there can be taken at any moment by an outgoing connection (the
    suite opens thousands), and weed then exits with "address already in use"."""
    import socket

    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    first, last = 12000, min(low, 65536) - 10000 - span  # base + 10000 + span stays below `low`
    if last <= first:
        first, last = 2000, 65536 - 10000 - span  # an unusual range: fall back to anywhere
    for _ in range(200):
        base = first + (os.getpid() * 7919 + time.monotonic_ns() // 1000) % (last - first)
        try:
            for p in [*range(base, base + span), *range(base + 10000, base + 10000 + span)]:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))  # no SO_REUSEADDR: fails on any use, TIME_WAIT included
        except OSError:
            time.sleep(0.01)
            continue
        return base
    raise RuntimeError("no free port range for weed mini")


def create_database() -> str:
    name = f"praxon_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(PG_ADMIN_URL, dbname=name)


def drop_database(url: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_settings(database_url: str, s3_endpoint: str, broker_url: str, bucket: str, **jobs) -> Settings:
    from services import catalog

    s = catalog.settings(database_url=database_url, broker_url=broker_url,
                         s3=S3Settings(endpoint=s3_endpoint, access_key="praxon", secret_key="praxon-test-secret",
                                       bucket=bucket),
                         metrics_port=0, extra_services=["tests.job_kinds:SPEC"])
    s.grpc.port = 0
    s.grpc.max_message_bytes = 1024 * 1024
    s.grpc.requests_per_second_per_token = 0  # tests and benchmarks drive servers hard; the limit has its own test
    s.jobs.lease_seconds = jobs.get("lease_seconds", 6.0)  # generous: heartbeats compete for two busy cores
    s.jobs.heartbeat_seconds = jobs.get("heartbeat_seconds", 0.5)
    s.jobs.reaper_interval_seconds = jobs.get("reaper_interval_seconds", 1.0)
    s.jobs.torch_threads = 1  # two cores shared by the test process, workers and servers
    s.jobs.max_active_per_tenant = s.jobs.max_active_per_tenant_kind = 0  # quotas have their own test
    return s


_claimed_dbs: dict[str, int] = {}  # Redis database number -> the fd holding its lock file


def claim_redis_db(timeout: float = 600) -> int:
    """A Redis database number (1-15) no other test process on this machine holds: each claim is an flock on a
    file in the temp folder, so two test suites running at once (two checkouts, a helper's run) never share a
    queue and steal each other's jobs. Waits for one to come free."""
    import fcntl
    import tempfile

    import redis

    deadline = time.monotonic() + timeout
    while True:
        for n in range(1, 16):
            if str(n) in _claimed_dbs:
                continue
            fd = os.open(os.path.join(tempfile.gettempdir(), f"praxon-test-redis-db-{n}.lock"), os.O_RDWR | os.O_CREAT,
                         0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            _claimed_dbs[str(n)] = fd
            try:  # whatever a killed run left there is nobody's now
                redis.Redis.from_url(f"{REDIS_URL}/{n}").flushdb()
            except redis.RedisError:
                pass  # a suite run against another broker
            return n
        if time.monotonic() > deadline:
            raise RuntimeError("no free Redis database for a test broker (15 are held)")
        time.sleep(0.5)


def private_broker(settings: Settings) -> Settings:
    """A copy of settings on a Redis database of its own, so a long-lived worker started with it consumes only the
    jobs of the server started with it (other fixtures' workers cannot claim them)."""
    base = settings.broker_url.get_secret_value().rpartition("/")[0]
    copy = settings.model_copy(deep=True)
    copy.broker_url = type(settings.broker_url)(f"{base}/{claim_redis_db()}")
    return copy


@contextmanager
def private_platform(settings: Settings):
    """Settings on a PostgreSQL database and a Redis database of their own. A test module that keeps a worker
    running for all its tests uses this, so that worker (and its lease reaper, which re-queues any expired job
    it finds in the job table onto its own broker) never touches another module's jobs."""
    url = create_database()
    db.migrate(Settings(database_url=url))
    private = private_broker(settings)
    private.database_url = type(settings.database_url)(url)
    try:
        yield private
    finally:
        drop_database(url)
        release_broker(private)


def release_broker(settings: Settings) -> None:
    """Give a private Redis database back (emptied): there are only 15, and many modules want one."""
    import redis

    url = settings.broker_url.get_secret_value()
    try:
        redis.Redis.from_url(url).flushdb()
    except redis.RedisError:
        pass  # a test that stopped its own Redis
    fd = _claimed_dbs.pop(url.rpartition("/")[2], None)
    if fd is not None:
        os.close(fd)  # drops the flock


def settings_env(settings: Settings) -> dict[str, str]:
    """The PRAXON_* variables a subprocess needs to see the same settings."""
    j = settings.jobs
    return {
        "PRAXON_DATABASE_URL": settings.database_url.get_secret_value(),
        "PRAXON_BROKER_URL": settings.broker_url.get_secret_value(),
        "PRAXON_S3__ENDPOINT": settings.s3.endpoint, "PRAXON_S3__BUCKET": settings.s3.bucket,
        "PRAXON_S3__ACCESS_KEY": settings.s3.access_key.get_secret_value(),
        "PRAXON_S3__SECRET_KEY": settings.s3.secret_key.get_secret_value(),
        "PRAXON_JOBS__LEASE_SECONDS": str(j.lease_seconds), "PRAXON_JOBS__HEARTBEAT_SECONDS": str(j.heartbeat_seconds),
        "PRAXON_JOBS__REAPER_INTERVAL_SECONDS": str(j.reaper_interval_seconds),
        "PRAXON_JOBS__TORCH_THREADS": str(j.torch_threads),
        "PRAXON_EXTRA_SERVICES": json.dumps(settings.extra_services), "PRAXON_METRICS_PORT": "0",
    }


class Worker:
    """A `praxon worker` process in its own session, so a test can kill -9 the whole worker."""

    def __init__(self, settings: Settings, log_dir: Path, queues: str = "all", name: str = "worker"):
        env = {**os.environ, **settings_env(settings), "PYTHONPATH": str(ROOT)}
        self.log = log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self.proc = spawn([sys.executable, "-m", "services.cli.main", "--log-level", "INFO", "worker",
                           "--queues", queues], self.log, env=env)

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(20)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class PlatformServer:
    """The gRPC server with the given services, on a loopback port, in a background event loop."""

    def __init__(self, settings: Settings, services: list[str]):
        from services.cli.serve import registrars
        from services.common.server import build_app_context, create_server

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = build_app_context(settings)
        self.app.store.ensure_bucket()
        self.server, self.port = self.run(create_server(self.app, registrars(services)))
        self.address = f"127.0.0.1:{self.port}"

    def run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        from services.common.server import shutdown

        self.run(shutdown(self.server, 1.0))
        hub = self.app.extras.get("event_hub")
        if hub is not None:
            self.run(hub.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.app.pool.close()


def token_for(settings: Settings, tenant: str) -> tuple[str, str]:
    with db.connect(settings) as conn:
        return db.create_token(conn, tenant)


def register_model(settings: Settings, tenant_id: str, name: str, tensors: dict, *, kind: str, config: dict,
                   alias: str = "") -> int:
    """A model version registered the way a job registers one (staged by a running job, numbered on commit), for
    tests that need a served model without training it; optionally moves `alias` to it. Returns its version."""
    from services.common.registry import Registry
    from services.common.store import ArtifactStore

    store = ArtifactStore(settings)
    store.ensure_bucket()
    pool = db.create_pool(settings, max_size=1)
    try:
        reg = Registry(pool, store)
        with db.connect(settings) as conn:
            job = conn.execute("INSERT INTO jobs (tenant_id, kind, queue, state) VALUES (%s, 'test.register', "
                               "'test', 'RUNNING') RETURNING id", (tenant_id,)).fetchone()
            reg.stage_model(conn, tenant_id, str(job["id"]), name, tensors, kind=kind, config=config, metrics={},
                            dataset_artifact_id=None, parent_version_ids=[])
            Registry.commit_job_outputs(conn, str(job["id"]))
        version = int(reg.resolve(tenant_id, name)["version"])
        if alias:
            reg.set_alias(tenant_id, name, alias, version)
        return version
    finally:
        pool.close()


def auth(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def wait_for(predicate, timeout: float = 60, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def job_row(settings: Settings, job_id: str) -> dict:
    with db.connect(settings) as conn:
        return conn.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()


def rpc_error_details(err: grpc.RpcError):
    """(code, ErrorInfo | None, BadRequest | None, RetryInfo | None) unpacked from a rich status."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    status = rpc_status.from_call(err)
    info = bad = retry = None
    for d in (status.details if status else []):
        for cls in (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest, error_details_pb2.RetryInfo):
            if d.Is(cls.DESCRIPTOR):
                msg = cls()
                d.Unpack(msg)
                if cls is error_details_pb2.ErrorInfo:
                    info = msg
                elif cls is error_details_pb2.BadRequest:
                    bad = msg
                else:
                    retry = msg
    return err.code(), info, bad, retry


@contextmanager
def weed_server(tmp: Path, bucket_hint: str = ""):
    from services.common.embedded import WeedS3

    weed = WeedS3(tmp, free_port_base(), "praxon", "praxon-test-secret").start()
    try:
        yield weed
    finally:
        weed.stop()


def wait_job(jobs_stub, token: str, job_id: str, timeout: float = 240):
    """The job once it reached a terminal state, read through JobService.GetJob."""
    from praxon.common.v1 import common_pb2
    from praxon.jobs.v1 import jobs_pb2

    def done():
        j = jobs_stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=auth(token)).job
        return j if j.state not in (common_pb2.JOB_STATE_QUEUED, common_pb2.JOB_STATE_RUNNING) else None
    return wait_for(done, timeout=timeout, interval=0.3, what=f"job {job_id}")


def call_retrying(method, request, md, timeout: float = 90, call_timeout: float = 60):
    """Calls `method`, retrying UNAVAILABLE answers after the delay their RetryInfo gives (as a client should)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return method(request, metadata=md, timeout=call_timeout)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            _, _, _, retry = rpc_error_details(err)
            assert retry is not None, "UNAVAILABLE without RetryInfo"
            time.sleep(min(retry.retry_delay.ToTimedelta().total_seconds(), 0.2))
