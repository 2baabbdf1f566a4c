"""services.common.client, the client side of every CLI command: target/token/database resolution (including
`praxon up`'s state file), retries that honour RetryInfo through the real server interceptors, streamed and
presigned uploads against the real ArtifactService and S3 server, model references, watch and wait_for_success
over a real job run by a worker."""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common import client
from services.common.embedded import free_port
from services.common.errors import InvalidArgument, Unavailable
from services.common.server import AppContext, create_server, shutdown
from tests import harness

# ---------------------------------------------------------------------------------------------- resolution


def test_target_resolution_order_and_up_state(tmp_path, monkeypatch):
    for key in ("PRAXON_ADDRESS", "PRAXON_TOKEN", "PRAXON_DATABASE_URL"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(SystemExit, match="no API token"):
        client.resolve_target(None, None, tmp_path)
    assert client.resolve_database_url(tmp_path) is None

    client.write_up_state(tmp_path, address="127.0.0.1:7001", token="up-token", pid=os.getpid(),
                          database_url="postgresql:///praxon?host=/somewhere")
    assert (tmp_path / client.UP_FILE).stat().st_mode & 0o077 == 0  # it holds a token: owner only
    t = client.resolve_target(None, None, tmp_path)
    assert (t.address, t.token) == ("127.0.0.1:7001", "up-token")
    assert client.resolve_database_url(tmp_path) == "postgresql:///praxon?host=/somewhere"
    monkeypatch.setenv("PRAXON_TOKEN", "env-token")
    monkeypatch.setenv("PRAXON_ADDRESS", "127.0.0.1:7002")
    t = client.resolve_target(None, None, tmp_path)
    assert (t.address, t.token) == ("127.0.0.1:7002", "env-token")
    t = client.resolve_target("127.0.0.1:7003", "flag-token", tmp_path)
    assert (t.address, t.token) == ("127.0.0.1:7003", "flag-token")
    monkeypatch.setenv("PRAXON_DATABASE_URL", "postgresql://elsewhere/db")
    assert client.resolve_database_url(tmp_path) is None  # an explicit setting wins (Settings reads it)


def test_state_of_a_launcher_that_is_gone_is_ignored(tmp_path, monkeypatch):
    monkeypatch.delenv("PRAXON_TOKEN", raising=False)
    monkeypatch.delenv("PRAXON_DATABASE_URL", raising=False)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    client.write_up_state(tmp_path, address="127.0.0.1:7001", token="stale", pid=dead.pid, database_url="x")
    assert client.read_up_state(tmp_path) == {}
    assert client.resolve_database_url(tmp_path) is None
    (tmp_path / client.UP_FILE).write_text("{not json")
    assert client.read_up_state(tmp_path) == {}


# ---------------------------------------------------------------------------------------------- model refs
def test_model_refs():
    assert client.parse_model_ref("", "rec") == ("rec", 0, "")
    assert client.parse_model_ref(" guard:12 ") == ("guard", 12, "")
    assert client.parse_model_ref("guard@production") == ("guard", 0, "production")
    ref = client.model_ref("guard:3")
    assert (ref.name, ref.version, ref.alias) == ("guard", 3, "")
    for bad in ("g:", "g:0", "g:-1", "g:v2", ":3", "@prod", "g@", "g@a:1", "g@a@b"):
        with pytest.raises(ValueError, match="model reference"):
            client.parse_model_ref(bad)
        with pytest.raises(SystemExit, match="model reference"):
            client.model_ref(bad)
    from services.common.serving import parse_model_ref  # the servicers' wrapper: same parser, InvalidArgument
    with pytest.raises(InvalidArgument) as err:
        parse_model_ref("g:0", "x")
    assert err.value.violations[0].field == "model"


@given(st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True), st.integers(1, 10**9),
       st.from_regex(r"[a-z0-9][a-z0-9_-]{0,20}", fullmatch=True))
def test_model_refs_round_trip(name, version, alias):
    assert client.parse_model_ref(name) == (name, 0, "")
    assert client.parse_model_ref(f"{name}:{version}") == (name, version, "")
    assert client.parse_model_ref(f"{name}@{alias}") == (name, 0, alias)


# ---------------------------------------------------------------------------------------------- retries
CALLS: dict[bytes, int] = {}


async def _flaky(request, context):  # fails `request[0]` times with a RetryInfo, then answers
    CALLS[request] = CALLS.get(request, 0) + 1
    if CALLS[request] <= request[0]:
        raise Unavailable("model is loading", retry_after_s=0.05 * CALLS[request])
    return b"ok:" + str(CALLS[request]).encode()


async def _long_wait(request, context):
    raise Unavailable("busy for a long while", retry_after_s=30)


async def _bad(request, context):
    CALLS[b"bad"] = CALLS.get(b"bad", 0) + 1
    raise InvalidArgument("widget.size", "must be positive")


def probe_registrar(server, app):
    handlers = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in
                [("Flaky", _flaky), ("LongWait", _long_wait), ("Bad", _bad)]}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.ClientProbe", handlers),))
    return []


@pytest.fixture(scope="module")
def probe_address(platform, settings):
    app = AppContext(settings, platform.app.pool, platform.app.store, platform.app.jobs, platform.app.registry)
    server, port = platform.run(create_server(app, [probe_registrar], port=0))
    yield f"127.0.0.1:{port}"
    platform.run(shutdown(server, 0))


def _channel(address, slept, budget=5.0):
    def sleep(seconds):  # records what the interceptor waits (and waits it)
        slept.append(seconds)
        time.sleep(seconds)
    return grpc.intercept_channel(grpc.insecure_channel(address), client._RetryInterceptor(budget, sleep))


def test_retries_wait_what_retry_info_says(probe_address, tenants):
    md = harness.auth(tenants["a"][1])
    slept: list[float] = []
    ch = _channel(probe_address, slept)
    assert ch.unary_unary("/test.ClientProbe/Flaky")(bytes([3, 1]), metadata=md) == b"ok:4"
    assert slept == pytest.approx([0.05, 0.10, 0.15])  # the server's RetryInfo delays, in order


def test_no_retry_past_the_budget_or_for_other_codes(probe_address, tenants):
    md = harness.auth(tenants["a"][1])
    slept: list[float] = []
    ch = _channel(probe_address, slept, budget=1.0)
    with pytest.raises(grpc.RpcError) as err:
        ch.unary_unary("/test.ClientProbe/LongWait")(b"", metadata=md)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and slept == []  # 30 s asked, 1 s allowed
    assert client.status_details(err.value)["retry_after_s"] == pytest.approx(30)
    with pytest.raises(grpc.RpcError) as err:
        ch.unary_unary("/test.ClientProbe/Bad")(b"", metadata=md)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and slept == [] and CALLS[b"bad"] == 1
    assert "widget.size: must be positive" in client.error_line(err.value)
    # the call's own deadline bounds the waiting too
    with pytest.raises(grpc.RpcError) as err:
        ch.unary_unary("/test.ClientProbe/Flaky")(bytes([50, 2]), metadata=md, timeout=0.5)
    assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert 0 < sum(slept) < 0.5 and CALLS[bytes([50, 2])] < 50


def test_target_channel_retries_through_the_real_stack(probe_address, tenants):
    target = client.Target(probe_address, tenants["a"][1])
    assert target.channel() is target.channel()  # one channel for every stub of the target
    assert target.channel().unary_unary("/test.ClientProbe/Flaky")(bytes([2, 3]), metadata=target.metadata) == b"ok:3"
    target.close()


def test_unavailable_without_retry_info_backs_off_a_few_times_then_fails():
    slept: list[float] = []
    ch = _channel(f"127.0.0.1:{free_port()}", slept)  # nothing listens there
    with pytest.raises(grpc.RpcError) as err:
        ch.unary_unary("/test.ClientProbe/Flaky")(b"\x00", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert len(slept) == 4 and all(0 < s <= 2.0 for s in slept)


def test_once_loaded_repeats_a_call_while_the_model_loads(probe_address, tenants):
    md = harness.auth(tenants["a"][1])
    ch = grpc.insecure_channel(probe_address)  # no retrying interceptor: once_loaded alone repeats the call
    assert client.once_loaded(ch.unary_unary("/test.ClientProbe/Flaky"), bytes([2, 4]), metadata=md) == b"ok:3"
    with pytest.raises(grpc.RpcError) as err:  # any other error at once
        client.once_loaded(ch.unary_unary("/test.ClientProbe/Bad"), b"", metadata=md)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    t0 = time.monotonic()
    with pytest.raises(SystemExit, match="the probe did not load within 1 s: UNAVAILABLE"):
        client.once_loaded(ch.unary_unary("/test.ClientProbe/LongWait"), b"", metadata=md, wait_s=1, what="the probe")
    assert time.monotonic() - t0 < 10
    ch.close()


# ---------------------------------------------------------------------------------------------- uploads
def _download(platform, token, artifact_id) -> bytes:
    stub = artifacts_pb2_grpc.ArtifactServiceStub(grpc.insecure_channel(platform.address))
    got = stub.GetArtifact(artifacts_pb2.GetArtifactRequest(artifact_id=artifact_id), metadata=harness.auth(token))
    with urllib.request.urlopen(got.url, timeout=30) as resp:  # the test's own S3 server
        return resp.read()


@pytest.mark.parametrize("presigned", [False, True])
def test_upload_streamed_and_presigned(platform, tenants, tmp_path, presigned):
    token = tenants["a"][1]
    target = client.Target(platform.address, token)
    data = os.urandom(2 * client.CHUNK + 12345)  # three messages when streamed
    art = client.upload(target, "blob.bin", data, "application/octet-stream", presigned=presigned)
    assert art.sha256 == hashlib.sha256(data).hexdigest() and art.size_bytes == len(data)
    assert _download(platform, token, art.id) == data
    path = tmp_path / "ratings.csv"
    path.write_text("user,item,timestamp\n1,2,3\n")
    art = client.upload(target, path.name, path, presigned=presigned)  # a path; content type from its name
    assert art.content_type == "text/csv" and _download(platform, token, art.id) == path.read_bytes()


# ---------------------------------------------------------------------------------------------- jobs
def test_watch_and_wait_for_success(platform, tenants, workers):
    token = tenants["a"][1]
    target = client.Target(platform.address, token)
    jobs = jobs_pb2_grpc.JobServiceStub(target.channel())
    workers()
    job = jobs.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=3, step_seconds=0.05),
                                metadata=target.metadata).job
    out = io.StringIO()
    done = client.wait_for_success(target, job, "self-test", out)
    assert client.state_name(done.state) == "SUCCEEDED" and done.result["steps"] == 3
    lines = out.getvalue().splitlines()
    assert lines[0] == f"self-test job {job.id}:"
    assert "100.0% SUCCEEDED" in lines[-1] and any("step 2/3" in line for line in lines)

    job = jobs.StartSelfTestJob(jobs_pb2.StartSelfTestJobRequest(steps=200, step_seconds=0.2),
                                metadata=target.metadata).job
    harness.wait_for(lambda: jobs.GetJob(jobs_pb2.GetJobRequest(job_id=job.id), metadata=target.metadata).job.state
                     != job.state, 120, what="the job to start")
    jobs.CancelJob(jobs_pb2.CancelJobRequest(job_id=job.id), metadata=target.metadata)
    with pytest.raises(SystemExit) as exit_:
        client.wait_for_success(target, job.id, "self-test", io.StringIO())
    assert f"self-test job {job.id} ended CANCELLED" in str(exit_.value.code)
