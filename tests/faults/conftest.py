"""Fault injection for tests/faults: each test runs real pieces (its own broker, S3 server, database proxy or
service process), breaks one while jobs and requests are in flight, and records a row of the fault table:
jobs finished exactly once, requests failed vs retried, data lost, and recovery time. The rows are printed at the
end of the session (`pytest tests/faults -s` or the summary)."""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from services.common import db
from services.common.embedded import free_port, spawn, stop
from services.common.jobs import JobStore
from services.common.queue import make_celery
from tests import harness
from tests.job_kinds import expected_digest

ROWS: list[dict] = []


def record(**row) -> None:
    ROWS.append(row)
    print("FAULT " + json.dumps(row), flush=True)


def pytest_terminal_summary(terminalreporter):
    if ROWS:
        terminalreporter.write_line("fault table (tests/faults):")
        for r in ROWS:
            terminalreporter.write_line("  " + json.dumps(r))


class RedisProcess:
    """A redis-server of the test's own, which it can kill and start again on the same port."""

    def __init__(self, log_dir: Path):
        self.port, self.log_dir, self.proc = free_port(), log_dir, None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisProcess":
        self.proc = spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no"], self.log_dir / f"redis-{self.port}.log")
        harness.wait_for(lambda: _listening(self.port), 30, what="redis-server")
        return self

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class SlowProxy:
    """A TCP proxy on loopback that delays every chunk by `delay_s` in each direction (a slow database link)."""

    def __init__(self, target_port: int, delay_s: float):
        self.target_port, self.delay_s, self.port = target_port, delay_s, free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _pipe(self, reader, writer):
        try:
            while data := await reader.read(65536):
                await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader, writer):
        try:
            r2, w2 = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, w2), self._pipe(r2, writer))

    def start(self) -> "SlowProxy":
        self.thread.start()
        fut = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._handle, "127.0.0.1", self.port), self.loop)
        self.server = fut.result(10)
        return self

    def stop(self) -> None:
        async def shutdown():
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def private(settings):
    """Settings on a database and Redis database of their own (no other module's worker sees these jobs)."""
    with harness.private_platform(settings) as s:
        yield s


def submit_counter(s, tenant_id: str, steps: int, step_seconds: float, key: str) -> dict:
    pool = db.create_pool(s, max_size=2)
    try:
        return JobStore(pool, make_celery(s)).submit(tenant_id, "test.counter",
                                                     {"steps": steps, "step_seconds": step_seconds}, key)
    finally:
        pool.close()


def check_ran_once(s, job_id: str, steps: int, timeout: float = 240) -> dict:
    """Wait for the job to finish and check it ran exactly once in effect: SUCCEEDED, every step applied once
    (the digest), one set of committed outputs. Returns the job row."""
    row = harness.wait_for(lambda: (r := harness.job_row(s, job_id))["state"] in ("SUCCEEDED", "FAILED",
                                                                                   "CANCELLED") and r,
                           timeout, interval=0.2, what="the job to finish")
    assert row["state"] == "SUCCEEDED", (row["error_reason"], row["error_message"])
    assert row["result"]["digest"] == expected_digest(steps)
    with db.connect(s) as conn:
        arts = conn.execute("SELECT name FROM artifacts WHERE producing_job_id = %s AND committed",
                            (job_id,)).fetchall()
        versions = conn.execute("SELECT 1 FROM model_versions WHERE producing_job_id = %s", (job_id,)).fetchall()
    assert sorted(a["name"] for a in arts) == ["counter.txt", "model/counter/weights.safetensors"]
    assert len(versions) == 1
    return row


__all__ = ["RedisProcess", "SlowProxy", "check_ran_once", "record", "submit_counter", "spawn", "stop", "time",
           "subprocess"]
