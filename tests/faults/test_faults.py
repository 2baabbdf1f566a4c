"""Faults while jobs and requests are in flight (each bounded in time). Every job must finish exactly once, no
stored data may be lost, and a client must see a retryable status (UNAVAILABLE / RESOURCE_EXHAUSTED), never
INTERNAL or UNKNOWN. kill -9 of a worker mid-job is tests/workers/test_exactly_once.py (Redis and RabbitMQ) and a
PostgreSQL restart is tests/workers/test_database_restart.py; the rest are here."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import uuid

import grpc
import psycopg
import pytest

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common.embedded import WeedS3, free_port, spawn, stop
from tests import harness

from .conftest import RedisProcess, SlowProxy, check_ran_once, record, submit_counter

STEPS, STEP_S = 16, 0.25


def _started(s, job_id: str, at: float = 0.2) -> None:
    harness.wait_for(lambda: harness.job_row(s, job_id)["progress"] >= at, 180, interval=0.1, what="job progress")


def test_broker_killed_and_restarted(private, workers, tmp_path):
    redis = RedisProcess(tmp_path).start()
    s = private.model_copy(update={"broker_url": type(private.broker_url)(redis.url)})
    tenant, _ = harness.token_for(s, "fault-broker")
    try:
        running = submit_counter(s, tenant, STEPS, STEP_S, f"b1-{uuid.uuid4().hex}")
        workers(s)
        _started(s, running["id"])
        redis.kill()
        # a job submitted while the broker is down: committed to the job table, enqueued later by the reaper
        during = submit_counter(s, tenant, 4, 0.05, f"b2-{uuid.uuid4().hex}")
        time.sleep(3)
        redis.start()
        back = time.monotonic()
        row1 = check_ran_once(s, running["id"], STEPS)
        row2 = check_ran_once(s, during["id"], 4, timeout=200)
        recovery = time.monotonic() - back  # until the job submitted during the outage had run
        record(fault="broker (Redis) kill -9, restarted after 3 s", jobs_exactly_once=2, jobs_total=2,
               attempts=[row1["attempts"], row2["attempts"]], data_lost=0,
               recovery_s=round(recovery, 1), note="the job submitted during the outage is enqueued by the reaper")
    finally:
        redis.kill()


def _weed(tmp, base):
    return WeedS3(tmp, base, "praxon", "praxon-test-secret")


def test_object_store_restarted_mid_job(private, workers, tmp_path):
    base = harness.free_port_base()
    weed = _weed(tmp_path / "weed", base).start()
    s = private.model_copy(deep=True)
    s.s3.endpoint, s.s3.bucket = weed.endpoint, "fault-s3"
    tenant, token = harness.token_for(s, "fault-s3")
    server = harness.PlatformServer(s, ["platform"])
    try:
        with grpc.insecure_channel(server.address) as ch:
            arts = artifacts_pb2_grpc.ArtifactServiceStub(ch)
            payload = b"kept across the restart" * 100
            kept = arts.UploadArtifact(iter([artifacts_pb2.UploadArtifactRequest(name="kept.bin", chunk=payload)]),
                                       metadata=harness.auth(token), timeout=30).artifact
            job = submit_counter(s, tenant, STEPS, STEP_S, f"s3-{uuid.uuid4().hex}")
            workers(s)
            _started(s, job["id"])
            weed.stop()
            failed = 0
            try:  # a request while the store is down gets a retryable status, not INTERNAL
                arts.UploadArtifact(iter([artifacts_pb2.UploadArtifactRequest(name="x.bin", chunk=b"x")]),
                                    metadata=harness.auth(token), timeout=60)
            except grpc.RpcError as err:
                failed += 1
                assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
            assert failed == 1, "an upload while the object store is down cannot succeed"
            weed = _weed(tmp_path / "weed", base).start()
            back = time.monotonic()
            row = check_ran_once(s, job["id"], STEPS)
            got = arts.GetArtifact(artifacts_pb2.GetArtifactRequest(artifact_id=kept.id),
                                   metadata=harness.auth(token), timeout=30)
            assert got.artifact.sha256 == hashlib.sha256(payload).hexdigest()
            import urllib.request
            assert urllib.request.urlopen(got.url, timeout=30).read() == payload  # the bytes survived
            record(fault="object store (weed mini) stopped mid-job, restarted", jobs_exactly_once=1, jobs_total=1,
                   attempts=row["attempts"], requests_failed_retryable=failed, data_lost=0,
                   recovery_s=round(time.monotonic() - back, 1))
    finally:
        server.stop()
        weed.stop()


def test_service_process_killed_mid_stream(private, workers, tmp_path):
    s = private
    tenant, token = harness.token_for(s, "fault-service")
    port = free_port()
    env = {**harness.settings_env(s), "PRAXON_GRPC__PORT": str(port), "PYTHONPATH": str(harness.ROOT)}
    cmd = [sys.executable, "-m", "services.cli.main", "serve", "platform"]

    def start():
        proc = spawn(cmd, tmp_path / f"serve-{time.monotonic_ns()}.log", env=env)
        harness.wait_for(lambda: _ready(port), 120, what="praxon serve")
        return proc
    proc = start()
    try:
        job = submit_counter(s, tenant, STEPS, STEP_S, f"svc-{uuid.uuid4().hex}")
        workers(s)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = jobs_pb2_grpc.JobServiceStub(ch)
            stream = stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=str(job["id"])), metadata=harness.auth(token),
                                   timeout=120)
            seen = 0
            with pytest.raises(grpc.RpcError) as e:
                for _ in stream:
                    seen += 1
                    if seen == 3:
                        proc.kill()  # kill -9 of the service process mid-stream
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        proc.wait(10)
        proc = start()
        back = time.monotonic()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:  # the client watches again, to the end
            events = list(jobs_pb2_grpc.JobServiceStub(ch).WatchJob(
                jobs_pb2.WatchJobRequest(job_id=str(job["id"])), metadata=harness.auth(token), timeout=240))
        assert events
        row = check_ran_once(s, job["id"], STEPS)
        record(fault="service process kill -9 mid WatchJob stream, restarted", jobs_exactly_once=1, jobs_total=1,
               attempts=row["attempts"], streams_failed=1, streams_resumed=1, data_lost=0,
               recovery_s=round(time.monotonic() - back, 1))
    finally:
        stop(proc)


def _ready(port: int) -> bool:
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            grpc.channel_ready_future(ch).result(timeout=0.5)
        return True
    except grpc.FutureTimeoutError:
        return False


def test_slow_database(private, workers):
    info = psycopg.conninfo.conninfo_to_dict(private.database_url.get_secret_value())
    proxy = SlowProxy(int(info.get("port") or 5432), delay_s=0.01).start()
    info.update(host="127.0.0.1", port=str(proxy.port))
    s = private.model_copy(update={"database_url": type(private.database_url)(psycopg.conninfo.make_conninfo(**info))})
    tenant, token = harness.token_for(s, "fault-slowdb")
    server = harness.PlatformServer(s, ["platform"])
    try:
        t0 = time.monotonic()
        job = submit_counter(s, tenant, 8, 0.05, f"slow-{uuid.uuid4().hex}")
        workers(s)
        row = check_ran_once(s, job["id"], 8)
        with grpc.insecure_channel(server.address) as ch:
            stub = jobs_pb2_grpc.JobServiceStub(ch)
            calls = 20
            for _ in range(calls):
                stub.GetJob(jobs_pb2.GetJobRequest(job_id=str(job["id"])), metadata=harness.auth(token), timeout=30)
        record(fault="slow database link (+10 ms each way per chunk)", jobs_exactly_once=1, jobs_total=1,
               attempts=row["attempts"], requests_ok=calls, requests_failed=0, data_lost=0,
               wall_s=round(time.monotonic() - t0, 1))
    finally:
        server.stop()
        proxy.stop()


def test_object_store_disk_full(private, tmp_path):
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    weed = None
    server = None
    try:
        weed = _weed(mnt / "weed", harness.free_port_base()).start()
        s = private.model_copy(deep=True)
        s.s3.endpoint, s.s3.bucket = weed.endpoint, "fault-full"
        s.grpc.max_message_bytes = 8 * 1024 * 1024
        _, token = harness.token_for(s, "fault-full")
        server = harness.PlatformServer(s, ["platform"])
        with grpc.insecure_channel(server.address, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
            arts = artifacts_pb2_grpc.ArtifactServiceStub(ch)
            stored, failure = [], None
            for i in range(40):  # 4 MiB each: the disk fills long before 40
                data = hashlib.sha256(str(i).encode()).digest() * (4 * 1024 * 1024 // 32)
                chunks = [artifacts_pb2.UploadArtifactRequest(name=f"fill-{i}.bin", chunk=data[:1 << 20])] + [
                    artifacts_pb2.UploadArtifactRequest(chunk=data[o:o + (1 << 20)])
                    for o in range(1 << 20, len(data), 1 << 20)]
                try:
                    a = arts.UploadArtifact(iter(chunks), metadata=harness.auth(token), timeout=120).artifact
                    stored.append((a.id, a.sha256))
                except grpc.RpcError as err:
                    failure = err
                    break
            assert failure is not None, "the disk never filled"
            assert failure.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED), \
                (failure.code(), failure.details())
            # nothing stored before is lost
            import urllib.request
            for aid, digest in stored:
                got = arts.GetArtifact(artifacts_pb2.GetArtifactRequest(artifact_id=aid),
                                       metadata=harness.auth(token), timeout=30)
                assert hashlib.sha256(urllib.request.urlopen(got.url, timeout=30).read()).hexdigest() == digest
            subprocess.run(["mount", "-o", "remount,size=512m", str(mnt)], check=True)
            t0 = time.monotonic()
            harness.wait_for(lambda: _upload_ok(arts, token), 120, interval=1.0, what="uploads to work again")
            record(fault="object store disk full (96 MiB tmpfs), then grown", uploads_ok=len(stored),
                   uploads_failed=1, failure_code=failure.code().name, data_lost=0,
                   recovery_s=round(time.monotonic() - t0, 1))
    finally:
        if server is not None:
            server.stop()
        if weed is not None:
            weed.stop()
        subprocess.run(["umount", "-l", str(mnt)])


def _upload_ok(arts, token) -> bool:
    try:
        arts.UploadArtifact(iter([artifacts_pb2.UploadArtifactRequest(name=f"after-{uuid.uuid4().hex}.bin",
                                                                      chunk=b"room again")]),
                            metadata=harness.auth(token), timeout=60)
        return True
    except grpc.RpcError:
        return False
