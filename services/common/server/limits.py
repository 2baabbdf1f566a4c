"""What a call may ask: its token's request rate (TokenBuckets), its size and content (RequestLimits,
check_request_content) and the server's default deadline (Deadlines)."""
from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any

from google.protobuf import descriptor

from services.common.errors import InvalidArgument, ResourceExhausted

_FD = descriptor.FieldDescriptor
_current_task = asyncio.current_task  # (a module name: every call without a client deadline runs it)


class TokenBuckets:
    """Request rate per API token: `rate` calls per second sustained, `burst` at once. Over it, a call gets
    RESOURCE_EXHAUSTED with RetryInfo saying when the next one is allowed (per process: each replica counts its
    own calls). At most `max_tokens` buckets are kept: a full table first drops every bucket that has refilled to
    its burst (it holds nothing a new bucket would not), else the oldest one."""

    def __init__(self, rate: float, burst: int, max_tokens: int = 10_000):
        self.rate, self.burst, self.max_tokens = float(rate), float(burst), max_tokens
        self._buckets: dict[str, list[float]] = {}  # token id -> [level, last refill time], changed in place

    def take(self, key: str, now: float | None = None) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic() if now is None else now
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_tokens:
                self._make_room(now)
            bucket = self._buckets[key] = [self.burst, now]
        level = bucket[0] + (now - bucket[1]) * self.rate
        if level > self.burst:
            level = self.burst
        bucket[1] = now
        if level < 1.0:
            bucket[0] = level
            raise ResourceExhausted(f"request rate limit of {self.rate:g}/s for this API token exceeded",
                                    retry_after_s=(1.0 - level) / self.rate, reason="RATE_LIMITED")
        bucket[0] = level - 1.0

    def _make_room(self, now: float) -> None:
        refilled = [key for key, (level, last) in self._buckets.items()
                    if level + (now - last) * self.rate >= self.burst]
        for key in refilled or [next(iter(self._buckets))]:
            del self._buckets[key]


_STRUCTS = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")


def check_request_content(msg: Any, path: str = "") -> None:
    """The one content rule for every request: no string (field, repeated item, map key or Struct key/value)
    contains a NUL character (PostgreSQL text cannot hold one, and no praxon field means one), and every number in
    a Struct is finite (JSON has no NaN or infinity). Raises InvalidArgument naming the field as the request
    spells it ("extra_params.lr", "items[2].text")."""
    name = msg.DESCRIPTOR.full_name
    if name == "google.protobuf.Value":
        kind = msg.WhichOneof("kind")
        if kind == "string_value":
            _check_text(msg.string_value, path)
        elif kind == "number_value" and not math.isfinite(msg.number_value):
            raise InvalidArgument(path, "must be a finite number", reason="NON_FINITE_NUMBER")
        elif kind == "struct_value":
            check_request_content(msg.struct_value, path)
        elif kind == "list_value":
            check_request_content(msg.list_value, path)
        return
    if name == "google.protobuf.Struct":
        for key, value in msg.fields.items():
            sub = f"{path}.{key}" if path else key
            _check_text(key, sub)
            check_request_content(value, sub)
        return
    if name == "google.protobuf.ListValue":
        for i, value in enumerate(msg.values):
            check_request_content(value, f"{path}[{i}]")
        return
    for fd, value in msg.ListFields():
        sub = f"{path}.{fd.name}" if path else fd.name
        if fd.type == _FD.TYPE_STRING:
            if fd.is_repeated:
                for i, item in enumerate(value):
                    _check_text(item, f"{sub}[{i}]")
            else:
                _check_text(value, sub)
        elif fd.type == _FD.TYPE_MESSAGE:
            if fd.message_type.GetOptions().map_entry:
                key_fd, value_fd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
                for key, item in value.items():
                    item_path = f"{sub}.{key}" if key_fd.type == _FD.TYPE_STRING else f"{sub}[{key}]"
                    if key_fd.type == _FD.TYPE_STRING:
                        _check_text(key, item_path)
                    if value_fd.type == _FD.TYPE_MESSAGE:
                        check_request_content(item, item_path)
                    elif value_fd.type == _FD.TYPE_STRING:
                        _check_text(item, item_path)
            elif fd.is_repeated:
                for i, item in enumerate(value):
                    check_request_content(item, f"{sub}[{i}]")
            else:
                check_request_content(value, sub)


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise InvalidArgument(path or "request", "must not contain a NUL character", reason="NUL_CHARACTER")


class Deadlines:
    """The server's deadline for the calls that came without one: watch() the call's task, unwatch() it when it
    ends. A sweeper thread looks for tasks past their deadline ten times per deadline (at most once a second) and
    has their event loop cancel them. Not a timer per call (asyncio.timeout cost about 6 µs a call, a few percent of
    a trivial RPC), nor a timer on the loop: while one is scheduled, every loop iteration computes a timeout and
    looks at the timer heap; the sweeper task that slept on the loop cost about 10k instructions per trivial call,
    2% (benchmarks/platform/RESULTS.md). A cancelled call is one expired() says was cancelled here; it is then
    un-cancelled, so that the call can answer DEADLINE_EXCEEDED."""

    def __init__(self, seconds: float):
        self.seconds, self.every = seconds, min(1.0, seconds / 10)
        self._due: dict[asyncio.Task, float] = {}   # changed on the loop's thread only
        self._expired: set[asyncio.Task] = set()    # the same
        self._sweeper: threading.Thread | None = None

    def watch(self, now: float | None = None) -> asyncio.Task:
        """Watch the current task from `now` (time.monotonic(), the event loop's clock; read here if not given)."""
        task = _current_task()
        self._due[task] = (time.monotonic() if now is None else now) + self.seconds
        if self._sweeper is None:
            self._sweeper = threading.Thread(target=self._sweep, args=(asyncio.get_running_loop(),),
                                             name="praxon-deadlines", daemon=True)
            self._sweeper.start()
        return task

    def unwatch(self, task: asyncio.Task) -> None:
        self._due.pop(task, None)  # (a task in _expired leaves it in expired(), or when _expire finds it done)

    def expired(self, task: asyncio.Task) -> bool:
        if task not in self._expired:
            return False
        self._expired.discard(task)
        task.uncancel()
        return True

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """The sweeper thread, until its loop is closed (a later loop's watch() starts another)."""
        try:
            while not loop.is_closed():
                time.sleep(self.every)
                now = time.monotonic()
                if any(at <= now for at in list(self._due.values())):  # (list(): one step, under the GIL)
                    loop.call_soon_threadsafe(self._expire, now)
        except RuntimeError:  # the loop closed between the check and the call
            pass
        finally:
            self._sweeper = None

    def _expire(self, now: float) -> None:
        """On the loop's thread: cancel the tasks due by `now`."""
        self._expired = {task for task in self._expired if not task.done()}  # ended before it saw its cancellation
        for task, at in list(self._due.items()):
            if at <= now and task not in self._expired:
                self._expired.add(task)
                task.cancel()


class RequestLimits:
    """Deadlines, message size and content: a unary call without a client deadline gets the server default; a
    request larger than the configured limit is INVALID_ARGUMENT naming its largest field; every request message
    (each one of a client stream too) passes check_request_content."""

    def __init__(self, max_message_bytes: int, default_deadline_s: float):
        self.max_bytes, self.default_deadline_s = max_message_bytes, default_deadline_s
        self.deadlines = Deadlines(default_deadline_s)

    def check(self, request: Any) -> None:
        if hasattr(request, "ByteSize"):
            self._check_size(request)
            check_request_content(request)

    def _check_size(self, request) -> None:
        if request.ByteSize() <= self.max_bytes:
            return
        largest, name = 0, "request"
        for fd, _ in request.ListFields():  # size of each field alone, to name the offender
            probe = type(request)()
            probe.CopyFrom(request)
            for other, _ in request.ListFields():
                if other.name != fd.name:
                    probe.ClearField(other.name)
            if probe.ByteSize() > largest:
                largest, name = probe.ByteSize(), fd.name
        raise InvalidArgument(name, f"request is {request.ByteSize()} bytes; the limit is {self.max_bytes}",
                              reason="MESSAGE_TOO_LARGE")


