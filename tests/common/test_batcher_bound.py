"""The dynamic batcher's queue bound (services.common.serving.Batcher.max_queued): with its worker blocked, the
queue fills to the bound and no further; every request over it gets RESOURCE_EXHAUSTED (QUEUE_FULL) with a retry
delay at once, which the gRPC error mapping turns into RetryInfo; once the worker runs again every admitted request
gets its own result."""
from __future__ import annotations

import asyncio
import random
import threading

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from services.common.errors import ResourceExhausted
from services.common.server import to_status
from services.common.serving import Batcher


def _retry_delay_s(status: grpc.Status) -> float | None:
    for key, value in status.trailing_metadata:
        if key == "grpc-status-details-bin":
            for d in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.RetryInfo()
                if d.Unpack(info):
                    return info.retry_delay.ToTimedelta().total_seconds()
    return None


def _blocked_batcher(bound: int):
    started, release = threading.Event(), threading.Event()

    def blocked(items):
        started.set()
        release.wait(30)
        return [2 * x for x in items]

    b = Batcher(blocked, max_batch=1, max_wait_ms=0, workers=1, max_queued=bound, retry_after_s=0.25)
    return b, started, release


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_full_queue_refuses_with_retry_info_and_holds_no_more_than_the_bound(seed):
    rng = random.Random(seed)
    bound, attempts = rng.randint(3, 40), rng.randint(100, 400)
    b, started, release = _blocked_batcher(bound)

    async def run():
        try:
            first = asyncio.ensure_future(b.run(-1))
            await asyncio.to_thread(started.wait, 10)  # the only worker is busy: everything else queues
            calls, deepest = [], 0
            for i in range(attempts):
                if rng.random() < 0.2:  # a request of several items: all admitted or none
                    xs = list(range(1000 * i, 1000 * i + rng.randint(2, 4)))
                    calls.append((asyncio.ensure_future(b.run_many(xs)), [2 * x for x in xs], len(xs)))
                else:
                    calls.append((asyncio.ensure_future(b.run(i)), 2 * i, 1))
                await asyncio.sleep(0)  # the new call either enqueued its items or was refused
                deepest = max(deepest, b.queued)
            refused = [(t, n) for t, _, n in calls if t.done()]  # nothing ran yet: done means refused
            admitted = [(t, want) for t, want, _ in calls if not t.done()]
            release.set()
            results = await asyncio.wait_for(asyncio.gather(first, *(t for t, _ in admitted)), 30)
            return deepest, refused, admitted, results
        finally:
            release.set()
            await b.close()

    deepest, refused, admitted, results = asyncio.run(run())
    assert deepest <= bound  # what waiting requests hold is bounded by the count, whatever arrives
    assert refused and admitted
    assert b.rejected == sum(n for _, n in refused)
    assert results == [-2] + [want for _, want in admitted]
    for task, _ in refused:
        exc = task.exception()
        assert isinstance(exc, ResourceExhausted) and exc.reason == "QUEUE_FULL" and exc.retry_after_s == 0.25
    status = to_status(refused[0][0].exception(), "req-1")
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _retry_delay_s(status) == pytest.approx(0.25)


def test_a_request_larger_than_the_bound_runs_when_the_queue_is_empty():
    b, started, release = _blocked_batcher(4)
    release.set()

    async def run():
        try:
            return await b.run_many(list(range(10)))
        finally:
            await b.close()
    assert asyncio.run(run()) == [2 * x for x in range(10)]
    assert b.rejected == 0


def test_the_bound_comes_from_the_service_settings_section(monkeypatch):
    from services.catalog import settings
    from services.common.spec import service_settings
    from services.moderation.engine import ModerationEngine
    from services.moderation.settings import ServingConfig

    monkeypatch.setenv("PRAXON_MODERATION__MAX_QUEUED", "7")
    monkeypatch.setenv("PRAXON_MODERATION__RETRY_AFTER_S", "3")
    engine = ModerationEngine(None, None, service_settings(settings(), "moderation", ServingConfig))
    assert (engine.batcher.max_queued, engine.batcher.retry_after_s) == (7, 3.0)
