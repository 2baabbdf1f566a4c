"""The client side of every `praxon` command (and of the demo): where the platform is and which token to use
(including what `praxon up` started), a channel that retries what the server asks to retry, uploads, model
references, and following a job to its end.

Imports grpc and the generated contracts only: no torch, no pandas, no service module, so a CLI command starts in
well under a second. Anything heavier is imported inside the function that needs it.

- `resolve_target(address, token, data_dir)`: flag, then PRAXON_ADDRESS / PRAXON_TOKEN, then the state file
  `praxon up` writes into its data dir (UP_FILE: address, demo token, database URL, pid), then the copy it keeps in
  the user's PRAXON_HOME (default ~/.praxon), so commands find a running `praxon up` from any directory.
- `resolve_database_url(data_dir)`: PRAXON_DATABASE_URL, else the database `praxon up` runs (so `praxon token
  create` after `praxon up` talks to the embedded PostgreSQL), else None (the Settings default).
- `Target.channel()`: one channel per target whose unary calls are retried on UNAVAILABLE and RESOURCE_EXHAUSTED,
  after the delay the server's RetryInfo gives (a short backoff when it gives none), within `retry_budget_s`.
- `new_idempotency_key()`: sent with every Start*Job request, so that a replayed call cannot submit a job twice.
- `upload(target, name, data, content_type)`: streamed UploadArtifact (sha256 declared, checked by the server), or
  with presigned=True a presigned PUT (CreateUpload, PUT, CompleteUpload) that never passes the bytes through gRPC.
- `parse_model_ref` / `model_ref`: "name", "name:3", "name@alias" -> (name, version, alias) / common_pb2.ModelRef.
- `watch` (a progress bar over WatchJob, reconnecting after the last event seen) and `wait_for_success` (watch, then
  return the job if it SUCCEEDED, else exit with the job's structured error). A command that submitted a job never
  reports failure because watching was slow: a stream or a GetJob that fails for a reason that may pass (DEADLINE_
  EXCEEDED from a loaded server, UNAVAILABLE, ...) is retried, resuming after the last event seen; only when the
  server stays unreachable for reconnect_s does the command stop, saying the job's id and that it is still running
  (exit status STILL_RUNNING_EXIT, 75: EX_TEMPFAIL), never that it failed.
- `once_loaded(call, ...)`: a call repeated while it answers UNAVAILABLE, for the first request to a model the server
  is still loading (streaming calls included, which the channel does not retry)."""
from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from praxon.common.v1 import common_pb2
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common.modelref import split_model_ref

UP_FILE = "up.json"  # written by `praxon up` into its data dir: address, demo token, database URL, pid
DEFAULT_ADDRESS = "127.0.0.1:50051"
# Bytes of content per UploadArtifact message: under 1 MiB with room for the first message's name, content type and
# sha256 (a server configured with 1 MiB messages rejects a full 1 MiB chunk plus that header).
CHUNK = (1 << 20) - (64 << 10)
RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
# Watching a job, these may pass: the call is repeated (a loaded server answers DEADLINE_EXCEEDED, a proxy or a
# restart breaks a stream with UNAVAILABLE, CANCELLED, INTERNAL or UNKNOWN). The others (NOT_FOUND, PERMISSION_DENIED,
# UNAUTHENTICATED, INVALID_ARGUMENT) will not, and are raised at once.
WATCH_RETRIED = (*RETRIED, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED,
                 grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
STILL_RUNNING_EXIT = 75  # sysexits.h EX_TEMPFAIL: the job was submitted and runs on; watching it stopped
WATCH_RECONNECT_S = 300.0  # default: how long watching keeps retrying without hearing from the server


# ---------------------------------------------------------------------------------------------- where and who
def read_up_state(data_dir: str | os.PathLike | None) -> dict[str, Any]:
    """What `praxon up` recorded in data_dir (empty if it is not running there). A state file left by a launcher
    that no longer runs (its pid is gone) is ignored."""
    if not data_dir:
        return {}
    path = Path(data_dir) / UP_FILE
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    pid = found.get("pid")
    if isinstance(pid, int) and pid > 0:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return {}
        except PermissionError:
            pass  # alive, owned by someone else
    return found


def praxon_home() -> Path:
    """The user's own praxon folder: $PRAXON_HOME, else ~/.praxon. `praxon up` keeps a copy of its state file there,
    so that every command finds the platform it runs from any directory."""
    return Path(os.environ.get("PRAXON_HOME") or Path.home() / ".praxon")


def find_up_state(data_dir: str | os.PathLike | None) -> tuple[dict[str, Any], str]:
    """(what a running `praxon up` recorded, the file it was read from): the one in data_dir when it runs there,
    else the user's latest (praxon_home()); ({}, "") when none runs."""
    for folder in (data_dir, praxon_home()):
        found = read_up_state(folder)
        if found:
            return found, str(Path(folder) / UP_FILE)
    return {}, ""


def write_up_state(data_dir: str | os.PathLike, **state: Any) -> Path:
    """Record what `praxon up` runs (readable by its owner only: it holds a token), atomically, in data_dir and as
    the user's latest in praxon_home()."""
    home = praxon_home()
    home.mkdir(parents=True, exist_ok=True)
    path = Path(data_dir) / UP_FILE
    for target in (path, home / UP_FILE):
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps({**state, "data_dir": str(Path(data_dir).resolve())}))
        tmp.chmod(0o600)
        tmp.replace(target)
    return path


def clear_up_state(data_dir: str | os.PathLike) -> None:
    """`praxon up` stops: its state file goes, and the user's copy too when it is this process's."""
    (Path(data_dir) / UP_FILE).unlink(missing_ok=True)
    mine = praxon_home() / UP_FILE
    try:
        if json.loads(mine.read_text()).get("pid") == os.getpid():
            mine.unlink(missing_ok=True)
    except (OSError, ValueError, AttributeError):
        pass


def resolve_database_url(data_dir: str | os.PathLike | None) -> str | None:
    """The database a local admin command (token create, migrate) should use: PRAXON_DATABASE_URL when set, else
    the one a running `praxon up` uses (find_up_state), else None (the Settings default)."""
    if os.environ.get("PRAXON_DATABASE_URL"):
        return None  # Settings reads it itself
    return find_up_state(data_dir)[0].get("database_url") or None


@dataclass
class Target:
    """A platform address and the API token to call it with. `channel()` is shared by every stub of the target."""

    address: str
    token: str
    retry_budget_s: float = 60.0  # total time spent waiting to retry one call
    source: str = ""  # where the address came from (said when it cannot be reached)
    _channel: grpc.Channel | None = field(default=None, init=False, repr=False, compare=False)

    def channel(self) -> grpc.Channel:
        if self._channel is None:
            self._channel = retrying_channel(self.address, budget_s=self.retry_budget_s)
        return self._channel

    @property
    def metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.token}")]

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def resolve_target(address: str | None, token: str | None, data_dir: str | os.PathLike | None = ".praxon") -> Target:
    """Flags first, then PRAXON_ADDRESS / PRAXON_TOKEN, then what a running `praxon up` recorded (find_up_state).
    The target is remembered (last_target) so that a failure to reach it can say where the address came from."""
    global last_target
    up, up_file = find_up_state(data_dir)
    source = ("--address" if address else "PRAXON_ADDRESS" if os.environ.get("PRAXON_ADDRESS") else
              up_file if up.get("address") else f"the default {DEFAULT_ADDRESS}")
    address = address or os.environ.get("PRAXON_ADDRESS") or up.get("address") or DEFAULT_ADDRESS
    token = token or os.environ.get("PRAXON_TOKEN") or up.get("token")
    if not token:
        raise SystemExit("no API token: pass --token, set PRAXON_TOKEN, or run `praxon up` first "
                         "(`praxon token create --tenant NAME` prints a new one)")
    last_target = Target(address, token, source=source)
    return last_target


last_target: Target | None = None  # the target the running command resolved (for its error message)


def unreachable_hint(err: BaseException) -> str:
    """For a call that could not reach the platform (UNAVAILABLE): which address was tried, where it came from,
    and how to set it; "" for any other error."""
    code = getattr(err, "code", None)
    if last_target is None or not callable(code) or code() != grpc.StatusCode.UNAVAILABLE:
        return ""
    return (f" (tried {last_target.address}, from {last_target.source}; set the address with --address or "
            f"PRAXON_ADDRESS, or start the platform with `praxon up`)")


# ---------------------------------------------------------------------------------------------- retries
def status_details(err: grpc.RpcError) -> dict[str, Any]:
    """The rich details of a failed call: {"reason", "violations": [(field, description)], "retry_after_s"}."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    out: dict[str, Any] = {"reason": "", "violations": [], "retry_after_s": None}
    try:
        status = rpc_status.from_call(err)
    except (ValueError, AttributeError, TypeError):
        return out
    for d in status.details if status else []:
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            out["reason"] = info.reason
        elif d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            d.Unpack(bad)
            out["violations"] = [(v.field, v.description) for v in bad.field_violations]
        elif d.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            d.Unpack(info)
            out["retry_after_s"] = info.retry_delay.ToTimedelta().total_seconds()
    return out


def retry_delay(err: grpc.RpcError, attempt: int) -> float | None:
    """Seconds to wait before retrying a failed call, or None when it should not be retried: UNAVAILABLE and
    RESOURCE_EXHAUSTED are retried after the server's RetryInfo delay; UNAVAILABLE without one (e.g. nothing
    listens yet) with a short jittered exponential backoff for a few attempts. (RESOURCE_EXHAUSTED without RetryInfo,
    e.g. a message over the size limit, will not get better by retrying.)"""
    if not isinstance(err, grpc.RpcError) or not hasattr(err, "code") or err.code() not in RETRIED:
        return None
    asked = status_details(err)["retry_after_s"]
    if asked is not None:
        return max(0.0, asked)
    if err.code() != grpc.StatusCode.UNAVAILABLE or attempt >= 4:
        return None
    return min(2.0, 0.1 * 2 ** attempt) * (0.5 + random.random() / 2)  # jitter, not security


class _RetryInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Retries unary calls as retry_delay says, while the total wait stays within budget_s and the call's own
    deadline. (Streaming calls are not replayed here: WatchJob resumes in `watch`, uploads restart in `upload`.)"""

    def __init__(self, budget_s: float, sleep=time.sleep):
        self.budget_s, self.sleep = budget_s, sleep

    def intercept_unary_unary(self, continuation, client_call_details, request):
        waited, attempt = 0.0, 0
        deadline = None if client_call_details.timeout is None else time.monotonic() + client_call_details.timeout
        details = client_call_details
        while True:
            outcome = continuation(details, request)
            err = outcome.exception() if outcome.code() != grpc.StatusCode.OK else None
            if err is None:
                return outcome
            delay = retry_delay(err, attempt)
            if delay is None or waited + delay > self.budget_s or (
                    deadline is not None and time.monotonic() + delay >= deadline):
                return outcome
            self.sleep(delay)
            waited += delay
            attempt += 1
            if deadline is not None:  # the retry gets what is left of the caller's deadline, not a fresh one
                details = _CallDetails(details.method, max(0.001, deadline - time.monotonic()), details.metadata,
                                       details.credentials, getattr(details, "wait_for_ready", None),
                                       getattr(details, "compression", None))


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                           "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


def tls_credentials_from_env() -> grpc.ChannelCredentials | None:
    """TLS for the CLI from PRAXON_TLS_CA_FILE (the server's CA), plus PRAXON_TLS_CERT_FILE / PRAXON_TLS_KEY_FILE
    for mTLS; None (plaintext) when none is set."""
    from pathlib import Path

    ca, cert, key = (os.environ.get(f"PRAXON_TLS_{n}_FILE", "") for n in ("CA", "CERT", "KEY"))
    if not (ca or cert):
        return None
    return grpc.ssl_channel_credentials(root_certificates=Path(ca).read_bytes() if ca else None,
                                        private_key=Path(key).read_bytes() if key else None,
                                        certificate_chain=Path(cert).read_bytes() if cert else None)


def retrying_channel(address: str, *, budget_s: float = 60.0,
                     credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A channel whose unary calls retry UNAVAILABLE/RESOURCE_EXHAUSTED: TLS with `credentials` (default: from
    the PRAXON_TLS_* environment), else plaintext (loopback / inside a mesh)."""
    credentials = credentials or tls_credentials_from_env()
    raw = grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)
    return grpc.intercept_channel(raw, _RetryInterceptor(budget_s))


def once_loaded(call, *args, wait_s: float = 120.0, what: str = "the model", **kwargs):
    """call(*args, **kwargs), repeated every half second while it fails UNAVAILABLE (the server loads a model on its
    first request and asks the caller to retry shortly), for at most wait_s seconds; then the caller exits saying
    that `what` did not load. Other errors are raised at once."""
    give_up = time.monotonic() + wait_s
    while True:
        try:
            return call(*args, **kwargs)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            if time.monotonic() >= give_up:
                raise SystemExit(f"{what} did not load within {wait_s:g} s: {error_line(exc)}") from None
        time.sleep(0.5)


def new_idempotency_key() -> str:
    """A fresh key for one Start*Job request. The channel replays a call whose answer was lost (UNAVAILABLE after
    the server committed), and with the key the server returns the job it already made instead of a second one."""
    return uuid.uuid4().hex


def error_line(err: grpc.RpcError) -> str:
    """A failed call as one line: code, message, and the field violations if any."""
    d = status_details(err)
    text = f"{err.code().name}: {err.details()}"
    if d["violations"]:
        listed = "; ".join(f"{f}: {why}" for f, why in d["violations"])
        if listed not in text:
            text += f" ({listed})"
    return text


# ---------------------------------------------------------------------------------------------- uploads
def content_type_of(data: bytes, name: str = "") -> str:
    """A guess for data files: Parquet by its magic, safetensors by extension, else CSV/TSV/JSON by extension."""
    if data[:4] == b"PAR1":
        return "application/vnd.apache.parquet"
    suffix = Path(name).suffix.lower()
    return {".safetensors": "application/vnd.safetensors", ".json": "application/json",
            ".jsonl": "application/jsonl", ".tsv": "text/tab-separated-values"}.get(suffix, "text/csv")


def upload(target: Target, name: str, data: bytes | os.PathLike | str, content_type: str = "", *,
           presigned: bool = False, attempts: int = 3) -> common_pb2.ArtifactRef:
    """Register bytes (or a file's content) as an artifact of the caller's tenant and return its ArtifactRef.
    Streamed through ArtifactService.UploadArtifact in CHUNK-sized messages with the sha256 declared (the server
    checks it), restarted from the first chunk if the call fails with a retryable status; presigned=True PUTs the
    bytes straight to the object store with a URL from CreateUpload, then CompleteUpload verifies and registers."""
    from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc

    if not isinstance(data, bytes | bytearray | memoryview):
        data = Path(data).read_bytes()
    data = bytes(data)
    content_type = content_type or content_type_of(data, name)
    digest = hashlib.sha256(data).hexdigest()
    stub = artifacts_pb2_grpc.ArtifactServiceStub(target.channel())
    if presigned:
        import urllib.request

        created = stub.CreateUpload(artifacts_pb2.CreateUploadRequest(name=name, content_type=content_type,
                                                                      sha256=digest), metadata=target.metadata)
        req = urllib.request.Request(created.url, data=data, method="PUT", headers={"Content-Type": content_type})
        with urllib.request.urlopen(req, timeout=300) as resp:  # a URL the platform signed
            if resp.status >= 300:
                raise OSError(f"presigned upload of {name} failed: HTTP {resp.status}")
        return stub.CompleteUpload(artifacts_pb2.CompleteUploadRequest(upload_id=created.upload_id),
                                   metadata=target.metadata).artifact

    def messages():
        yield artifacts_pb2.UploadArtifactRequest(name=name, content_type=content_type, sha256=digest,
                                                  chunk=data[:CHUNK])
        for i in range(CHUNK, len(data), CHUNK):
            yield artifacts_pb2.UploadArtifactRequest(chunk=data[i:i + CHUNK])

    for attempt in range(attempts):
        try:
            return stub.UploadArtifact(messages(), metadata=target.metadata).artifact
        except grpc.RpcError as err:
            delay = retry_delay(err, attempt)
            if delay is None or attempt == attempts - 1:
                raise
            time.sleep(delay)
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------- model references
def parse_model_ref(text: str | None, default_name: str = "") -> tuple[str, int, str]:
    """"name", "name:3" or "name@alias" -> (name, version, alias) (services.common.modelref; ValueError if malformed)."""
    return split_model_ref(text, default_name)


def model_ref(text: str | None, default_name: str = "") -> common_pb2.ModelRef:
    """parse_model_ref as the contracts' ModelRef (a CLI argument error exits with one line naming it)."""
    try:
        name, version, alias = parse_model_ref(text, default_name)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    return common_pb2.ModelRef(name=name, version=version, alias=alias)


# ---------------------------------------------------------------------------------------------- jobs
def state_name(state: int) -> str:
    return common_pb2.JobState.Name(state).removeprefix("JOB_STATE_")


def duration(seconds: float) -> str:
    """42s, 7m05s, 3h12m, 2d04h."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def progress_line(e: common_pb2.JobEvent, width: int = 30) -> str:
    """One event as a progress bar: fraction, state, message, "ETA ..." when the job reports its time left (metric
    eta_s, while it runs), then the other metrics."""
    filled = int(round(min(1.0, max(0.0, e.progress)) * width))
    metrics = " ".join(f"{k}={v:.4g}" for k, v in sorted(e.metrics.items()) if k != "eta_s")
    if "eta_s" in e.metrics and state_name(e.state) not in TERMINAL:
        metrics = f"ETA {duration(e.metrics['eta_s'])} " + metrics
    return (f"[{'#' * filled}{'.' * (width - filled)}] {e.progress * 100:5.1f}% {state_name(e.state):9} "
            f"{e.message[:50]:50} {metrics}")


class StillRunning(SystemExit):
    """Watching a submitted job stopped (the server stayed unreachable) while the job, as far as anyone knows, runs
    on: exit status STILL_RUNNING_EXIT. `watch` has already said so, with the job's id."""

    def __init__(self, job_id: str, state: str, error: str):
        super().__init__(STILL_RUNNING_EXIT)
        self.job_id, self.state, self.error = job_id, state, error


def watch_retry_delay(err: grpc.RpcError, attempt: int) -> float | None:
    """Seconds to wait before repeating a failed WatchJob or GetJob of `watch`, None when the error will not pass:
    the server's RetryInfo delay when it gives one, else a jittered exponential backoff up to 5 s for WATCH_RETRIED
    codes."""
    if not isinstance(err, grpc.RpcError) or not hasattr(err, "code") or err.code() not in WATCH_RETRIED:
        return None
    asked = status_details(err)["retry_after_s"]
    if asked is not None:
        return max(0.0, asked)
    return min(5.0, 0.2 * 2 ** min(attempt, 5)) * (0.5 + random.random() / 2)  # jitter, not security


def watch(target: Target, job_id: str, out=None, *, reconnect_s: float | None = None) -> common_pb2.Job:
    """Follow a job to its end with a progress bar and return the final job. A stream that breaks or a GetJob that
    fails for a reason that may pass (WATCH_RETRIED: a loaded server's DEADLINE_EXCEEDED, UNAVAILABLE, ...) is
    repeated, the stream resumed after the last event seen (WatchJob after_sequence), for as long as the server is
    heard from at least every reconnect_s (default PRAXON_WATCH_RECONNECT_S, else WATCH_RECONNECT_S); past that,
    it says on stderr that the job is still running, with its id and the command that follows it, and raises
    StillRunning (exit status 75). A job that runs long without events is not a failure: the stream just stays
    open."""
    out = out or sys.stdout  # looked up at call time, so a redirected stdout is honoured
    if reconnect_s is None:
        reconnect_s = float(os.environ.get("PRAXON_WATCH_RECONNECT_S") or WATCH_RECONNECT_S)
    stub = jobs_pb2_grpc.JobServiceStub(target.channel())
    after, attempt, heard = 0, 0, time.monotonic()
    ended, state, read_job, drained_from = False, "QUEUED", False, -1
    tty = getattr(out, "isatty", lambda: False)()
    while True:
        try:
            if read_job or ended:
                # after a terminal event, a stream that closed early or a failed call: the job as the server has it
                # (an answer here also shows the server is reachable, even while a job runs long without events)
                job = stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=target.metadata).job
                attempt, heard, state, read_job = 0, time.monotonic(), state_name(job.state), False
                if state in TERMINAL and (ended or drained_from == after):
                    if tty:
                        out.write("\n")
                    out.flush()
                    return job
                if state in TERMINAL:  # it ended while the stream was down: show the events missed (while the
                    drained_from = after  # stream brings new ones)
                ended = False
            for item in stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id, after_sequence=after),
                                      metadata=target.metadata):
                e = item.event
                after, attempt, heard = max(after, e.sequence), 0, time.monotonic()
                state = state_name(e.state)
                out.write(("\r" if tty else "") + progress_line(e) + ("" if tty else "\n"))
                out.flush()
                if state in TERMINAL:
                    ended = True
                    break
            read_job = True  # the stream ended: read the job; resume the stream if it runs on
        except grpc.RpcError as err:
            delay = watch_retry_delay(err, attempt)
            if delay is None:
                raise
            if time.monotonic() - heard + delay > reconnect_s:
                if tty:
                    out.write("\n")
                out.flush()
                line = error_line(err)
                print(f"job {job_id} was submitted and is still running (last seen {state}); watching it stopped "
                      f"after {reconnect_s:g} s without an answer ({line}). Follow it with `praxon jobs watch "
                      f"{job_id}`.", file=sys.stderr, flush=True)
                raise StillRunning(job_id, state, line) from None
            time.sleep(delay)
            attempt += 1
            read_job = True


def job_error(job: common_pb2.Job) -> str:
    """A finished job's structured error, one problem per line."""
    problems = "\n".join(f"  {p}" for p in job.error.message.split("; ") if p) or "  (no message)"
    return f"({job.error.reason or state_name(job.state)}):\n{problems}"


def wait_for_success(target: Target, job: common_pb2.Job | str, what: str = "", out=None, *,
                     reconnect_s: float | None = None) -> common_pb2.Job:
    """Watch a job (a Job or its id) with a progress bar; return it if it SUCCEEDED, else exit (SystemExit, status
    1) with its state and structured error, one problem per line. If the server stays unreachable, StillRunning
    (status 75) after saying the job runs on (see watch)."""
    out = out or sys.stdout
    job_id = job if isinstance(job, str) else job.id
    what = what or (job.kind if not isinstance(job, str) else "")
    out.write(f"{what + ' ' if what else ''}job {job_id}:\n")
    done = watch(target, job_id, out, reconnect_s=reconnect_s)
    if state_name(done.state) != "SUCCEEDED":
        raise SystemExit(f"{what + ' ' if what else ''}job {job_id} ended {state_name(done.state)} {job_error(done)}")
    return done
