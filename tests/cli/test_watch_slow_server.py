"""A command that submitted a job does not fail because watching it was slow (issue 39): `praxon selftest` (the CLI,
a subprocess) against a slowed platform. The slowing is a gRPC proxy in front of the real platform server: it passes
every call through, but ends each WatchJob stream after two events and answers the first GetJob calls, after a
delay, with the DEADLINE_EXCEEDED a loaded server gave ("server deadline of 30.0s exceeded"). The CLI resumes the
stream after the last event it saw (WatchJob after_sequence) and reports the job's success; when the server stays
unreachable it says that the job, whose id it gives, is still running (exit status 75), and the job does finish."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc

from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common.client import STILL_RUNNING_EXIT, progress_line, state_name
from tests import harness

WATCH = "/praxon.jobs.v1.JobService/WatchJob"
GET = "/praxon.jobs.v1.JobService/GetJob"
SLOW = "server deadline of 30.0s exceeded"


class SlowedPlatform:
    """A proxy to `upstream` on a loopback port. events_per_stream: WatchJob streams end DEADLINE_EXCEEDED after
    that many events; get_failures: that many GetJob calls answer DEADLINE_EXCEEDED; unreachable: every WatchJob and
    GetJob does. Each failure comes after delay_s, as from a server that is slow, not gone."""

    def __init__(self, upstream: str, *, events_per_stream: int = 2, get_failures: int = 2, unreachable: bool = False,
                 delay_s: float = 0.2):
        self.upstream = grpc.insecure_channel(upstream)
        self.events_per_stream, self.get_failures, self.unreachable = events_per_stream, get_failures, unreachable
        self.delay_s = delay_s
        self.after_sequences: list[int] = []  # of every WatchJob request, in order
        self.get_calls = 0
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.so_reuseport", 0)])
        self.server.add_generic_rpc_handlers((self,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.stop(None)
        self.upstream.close()

    def service(self, details):  # grpc.GenericRpcHandler: every method, as raw bytes
        if details.method == WATCH:
            return grpc.unary_stream_rpc_method_handler(self.watch)
        return grpc.unary_unary_rpc_method_handler(lambda request, context: self.unary(details.method, request,
                                                                                       context))

    @staticmethod
    def _auth(context) -> list[tuple[str, str]]:
        return [(k, v) for k, v in context.invocation_metadata() if k == "authorization"]

    def _slow_failure(self, context):
        time.sleep(self.delay_s)
        context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, SLOW)

    def unary(self, method: str, request: bytes, context):
        if method == GET:
            with self.lock:
                self.get_calls += 1
                fail = self.unreachable or self.get_calls <= self.get_failures
            if fail:
                self._slow_failure(context)
        try:
            return self.upstream.unary_unary(method)(request, metadata=self._auth(context), timeout=60)
        except grpc.RpcError as err:
            context.set_trailing_metadata(err.trailing_metadata() or ())
            context.abort(err.code(), err.details())

    def watch(self, request: bytes, context):
        self.after_sequences.append(jobs_pb2.WatchJobRequest.FromString(request).after_sequence)
        if self.unreachable:
            self._slow_failure(context)
        n = 0
        for item in self.upstream.unary_stream(WATCH)(request, metadata=self._auth(context), timeout=120):
            yield item
            n += 1
            if n >= self.events_per_stream:
                self._slow_failure(context)


def _selftest(address: str, token: str, **env) -> subprocess.CompletedProcess:
    environ = {**{k: v for k, v in os.environ.items() if not k.startswith("PRAXON_")},
               "PYTHONPATH": str(harness.ROOT), **env}
    return subprocess.run([sys.executable, "-m", "services.cli.main", "selftest", "--address", address, "--token",
                           token, "--steps", "6", "--step-seconds", "0.1", "--data-dir", "/nonexistent"],
                          capture_output=True, text=True, timeout=240, env=environ)


def test_the_cli_keeps_watching_through_a_slowed_server(platform, tenants, workers):
    workers()
    proxy = SlowedPlatform(platform.address)
    try:
        out = _selftest(proxy.address, tenants["a"][1])
    finally:
        proxy.close()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "self-test SUCCEEDED" in out.stdout and "error" not in out.stderr.lower(), out.stdout + out.stderr
    # every event of the job shown once, in order, although no stream delivered more than two: it resumed after
    # the last event seen each time, and the GetJobs that timed out were repeated
    job_id = re.search(r"started self-test job (\S+)", out.stdout).group(1)
    jobs = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(platform.address))
    events = [r.event for r in jobs.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id),
                                             metadata=harness.auth(tenants["a"][1]), timeout=60)]
    assert state_name(events[-1].state) == "SUCCEEDED" and len(events) > 2
    lines = [line for line in out.stdout.splitlines() if line.startswith("[")]
    assert lines == [progress_line(e) for e in events], out.stdout
    seqs = proxy.after_sequences
    assert seqs[0] == 0 and all(b > a for a, b in zip(seqs, seqs[1:], strict=False)), seqs
    assert len(seqs) >= (len(events) + 1) // 2, seqs  # at most two events a stream
    assert proxy.get_calls > proxy.get_failures


def test_a_server_that_stays_unreachable_leaves_the_job_running_and_says_so(platform, tenants, workers):
    workers()
    token = tenants["a"][1]
    proxy = SlowedPlatform(platform.address, unreachable=True)
    try:
        out = _selftest(proxy.address, token, PRAXON_WATCH_RECONNECT_S="1")
    finally:
        proxy.close()
    assert out.returncode == STILL_RUNNING_EXIT, out.stdout + out.stderr
    job_id = re.search(r"started self-test job (\S+)", out.stdout).group(1)
    assert f"job {job_id} was submitted and is still running" in out.stderr, out.stderr
    assert f"praxon jobs watch {job_id}" in out.stderr and "error:" not in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    # and the job it submitted runs to its end
    jobs = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(platform.address))
    job = harness.wait_job(jobs, token, job_id)
    assert state_name(job.state) == "SUCCEEDED"
