"""The server's dispatcher on a real loopback server: error mapping, request ids, metrics, deadlines,
graceful shutdown, and what every call costs the server's accept loop."""
from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from prometheus_client import CollectorRegistry

from services.common.errors import InvalidArgument, Unavailable
from services.common.server import (Deadlines, create_server, current_request_id, current_tenant, metrics_of,
                                    shutdown)
from tests.harness import PlatformServer, auth, rpc_error_details


async def _bug(request, context):
    raise RuntimeError("secret internal detail")


async def _bad(request, context):
    raise InvalidArgument("widget.size", "must be positive")


async def _busy(request, context):
    raise Unavailable("model is loading", retry_after_s=2.5)


async def _slow(request, context):
    await asyncio.sleep(float(request.decode() or "0"))
    return b"done"


async def _who(request, context):
    """The tenant and request id the call's own metadata gave it, read after other calls had time to start."""
    await asyncio.sleep(0.01)
    return f"{current_tenant()} {current_request_id()}".encode()


def test_registrar(server, app):  # not a test: the handlers under test
    handlers = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in
                [("Bug", _bug), ("Bad", _bad), ("Busy", _busy), ("Slow", _slow), ("Who", _who)]}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Probe", handlers),))
    return []


test_registrar.__test__ = False


@pytest.fixture(scope="module")
def probe(platform, settings):
    registry = CollectorRegistry()
    s = settings.model_copy(deep=True)
    s.grpc.default_deadline_seconds = 1.0
    from services.common.server import AppContext
    app = AppContext(s, platform.app.pool, platform.app.store, platform.app.jobs, platform.app.registry)
    server, port = platform.run(create_server(app, [test_registrar], port=0, metrics_registry=registry))
    yield grpc.insecure_channel(f"127.0.0.1:{port}"), registry, server
    platform.run(shutdown(server, 0))


def call(channel, name, body=b"", **kw):
    return channel.unary_unary(f"/test.Probe/{name}")(body, **kw)


def test_unknown_exception_is_internal_with_request_id_and_no_detail(probe, tenants):
    channel, _, _ = probe
    with pytest.raises(grpc.RpcError) as err:
        call(channel, "Bug", metadata=[*auth(tenants["a"][1]), ("x-request-id", "req-123")])
    code, info, _, _ = rpc_error_details(err.value)
    assert code == grpc.StatusCode.INTERNAL
    assert "secret internal detail" not in err.value.details() and "req-123" in err.value.details()
    assert info.metadata["request_id"] == "req-123"
    assert ("x-request-id", "req-123") in err.value.trailing_metadata()


@pytest.mark.parametrize("authorization", [None, "Bearer prx_not_a_token", "Basic abc"])
def test_a_refused_token_is_answered_with_the_clients_request_id(probe, authorization):
    """The token is checked (cached or looked up) after the request id is read: a refusal names the client's id."""
    channel, _, _ = probe
    metadata = [("x-request-id", "req-auth")] + ([("authorization", authorization)] if authorization else [])
    with pytest.raises(grpc.RpcError) as err:
        call(channel, "Who", metadata=metadata)
    code, info, _, _ = rpc_error_details(err.value)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert info.metadata["request_id"] == "req-auth" and ("x-request-id", "req-auth") in err.value.trailing_metadata()


def test_a_call_without_a_request_id_gets_its_own(probe, tenants):
    """No x-request-id from the client: the error names one made for the call (made only when asked for, so two
    calls must still get two)."""
    channel, _, _ = probe
    ids = []
    for _ in range(2):
        with pytest.raises(grpc.RpcError) as err:
            call(channel, "Bug", metadata=auth(tenants["a"][1]))
        _, info, _, _ = rpc_error_details(err.value)
        rid = info.metadata["request_id"]
        assert len(rid) == 32 and int(rid, 16) >= 0 and rid in err.value.details()
        assert ("x-request-id", rid) in err.value.trailing_metadata()
        ids.append(rid)
    assert ids[0] != ids[1]


def test_concurrent_calls_each_see_their_own_metadata(probe, tenants):
    """The dispatcher hands the metadata grpc gave it to the call's handler (a context variable of the call's
    task): 64 overlapping calls from two tenants, each with its own request id, each see their own."""
    channel, _, _ = probe
    sent = [(("a", "b")[i % 2], f"who-{i}") for i in range(64)]
    futures = [channel.unary_unary("/test.Probe/Who").future(
        b"", metadata=[*auth(tenants[who][1]), ("x-request-id", rid)], timeout=30) for who, rid in sent]
    answers = [f.result().decode() for f in futures]
    assert answers == [f"{tenants[who][0]} {rid}" for who, rid in sent]


def test_project_errors_carry_details(probe, tenants):
    channel, _, _ = probe
    with pytest.raises(grpc.RpcError) as err:
        call(channel, "Bad", metadata=auth(tenants["a"][1]))
    code, info, bad, _ = rpc_error_details(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and info.reason == "INVALID_ARGUMENT"
    assert [(v.field, v.description) for v in bad.field_violations] == [("widget.size", "must be positive")]
    with pytest.raises(grpc.RpcError) as err:
        call(channel, "Busy", metadata=auth(tenants["a"][1]))
    code, _, _, retry = rpc_error_details(err.value)
    assert code == grpc.StatusCode.UNAVAILABLE and retry.retry_delay.ToMilliseconds() == 2500


def test_server_default_deadline_and_client_deadline(probe, tenants):
    channel, _, _ = probe
    with pytest.raises(grpc.RpcError) as err:  # no client deadline: the server's 1 s applies
        call(channel, "Slow", b"3", metadata=auth(tenants["a"][1]))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert call(channel, "Slow", b"1.5", metadata=auth(tenants["a"][1]), timeout=5) == b"done"  # client's wins


def test_metrics_count_latency_and_errors_by_code(probe, tenants):
    channel, registry, _ = probe
    call(channel, "Slow", b"0", metadata=auth(tenants["a"][1]))
    with pytest.raises(grpc.RpcError):
        call(channel, "Bad", metadata=auth(tenants["a"][1]))
    value = registry.get_sample_value
    assert value("praxon_grpc_server_handling_seconds_count", {"method": "/test.Probe/Slow", "code": "OK"}) >= 1
    assert value("praxon_grpc_server_errors_total", {"method": "/test.Probe/Bad", "code": "INVALID_ARGUMENT"}) >= 1
    assert value("praxon_grpc_server_in_flight", {"method": "/test.Probe/Slow"}) == 0


def test_metrics_of_servers_on_several_threads_are_summed_when_scraped():
    """Each thread keeps its own numbers without a lock (one writer each); a scrape adds them up per method."""
    class Context:
        def __init__(self, code):
            self._code = code

        def code(self):
            return self._code

    registry = CollectorRegistry()
    metrics = metrics_of(registry)

    def server_thread(calls: int, errors: int):
        m = metrics.of_method("/test.Probe/Sum")
        for i in range(calls):
            m.done(m.start(), Context(grpc.StatusCode.NOT_FOUND if i < errors else None))
        m.start()  # one call still in flight on this thread

    threads = [threading.Thread(target=server_thread, args=(n, e)) for n, e in [(300, 2), (500, 5)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    value = registry.get_sample_value
    assert value("praxon_grpc_server_handling_seconds_count", {"method": "/test.Probe/Sum", "code": "OK"}) == 793
    assert value("praxon_grpc_server_errors_total", {"method": "/test.Probe/Sum", "code": "NOT_FOUND"}) == 7
    assert value("praxon_grpc_server_in_flight", {"method": "/test.Probe/Sum"}) == 2


def test_unknown_methods_are_unimplemented_and_never_cached(probe, tenants):
    channel, _, server = probe
    dispatcher = server.praxon_dispatcher
    cached = len(dispatcher._handlers)
    for i in range(20):
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(f"/test.Probe/Missing{i}")(b"", metadata=auth(tenants["a"][1]), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert len(dispatcher._handlers) == cached


def test_graceful_shutdown_finishes_in_flight_calls(settings, tenants):
    server = PlatformServer(settings, ["platform"])
    extra, port = server.run(create_server(server.app, [test_registrar], port=0,
                                           metrics_registry=CollectorRegistry()))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    result = {}

    def slow():
        result["value"] = call(channel, "Slow", b"1.0", metadata=auth(tenants["a"][1]), timeout=10)
    t = threading.Thread(target=slow)
    t.start()
    import time
    time.sleep(0.4)
    server.run(shutdown(extra, 5.0))  # stops accepting, lets the in-flight call finish
    t.join(10)
    assert result["value"] == b"done"
    with pytest.raises(grpc.RpcError):
        call(channel, "Slow", b"0", metadata=auth(tenants["a"][1]), timeout=2)
    server.stop()


def test_each_call_waits_on_one_pending_request_however_many_methods_are_hosted(platform, monkeypatch):
    """grpc.aio's accept loop awaits asyncio.wait over one pending request per method registered with the core, on
    every incoming call; create_server serves methods through the generic handlers only (generic_methods_only),
    so a server hosting many services still waits on one."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from praxon.design.v1 import design_pb2_grpc
    from praxon.moderation.v1 import moderation_pb2_grpc
    from praxon.unlearning.v1 import unlearning_pb2_grpc

    def many_methods(server, app):  # 27 generated methods (each answers UNIMPLEMENTED), with health and reflection
        moderation_pb2_grpc.add_ModerationServiceServicer_to_server(moderation_pb2_grpc.ModerationServiceServicer(),
                                                                    server)
        design_pb2_grpc.add_DesignServiceServicer_to_server(design_pb2_grpc.DesignServiceServicer(), server)
        unlearning_pb2_grpc.add_UnlearningServiceServicer_to_server(
            unlearning_pb2_grpc.UnlearningServiceServicer(), server)
        return ["praxon.moderation.v1.ModerationService"]

    server, port = platform.run(create_server(platform.app, [many_methods], port=0,
                                              metrics_registry=CollectorRegistry()))
    waited = []
    real_wait = asyncio.wait

    async def counting_wait(futures, *args, **kwargs):
        futures = list(futures)
        task = asyncio.current_task()
        if task is not None and task.get_coro().__qualname__ == "AioServer._server_main_loop":
            waited.append(len(futures))
        return await real_wait(futures, *args, **kwargs)

    monkeypatch.setattr(asyncio, "wait", counting_wait)
    try:
        check = health_pb2_grpc.HealthStub(grpc.insecure_channel(f"127.0.0.1:{port}")).Check
        for _ in range(4):
            assert check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:  # a hosted method is still found (the base servicer's answer)
            grpc.insecure_channel(f"127.0.0.1:{port}").unary_unary(
                "/praxon.design.v1.DesignService/GetCampaign")(b"", timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED  # found, and the interceptor ran
    finally:
        monkeypatch.undo()
        platform.run(shutdown(server, 0))
    assert len(waited) >= 3 and set(waited) == {1}, waited


def test_default_deadline_cancels_only_overdue_calls_and_tells_them_apart():
    """Deadlines (the server default for calls without a client deadline): an overdue call is cancelled and
    expired() says so (and un-cancels it so that it can answer); a call cancelled by someone else (its client) is
    not reported as expired; a call that ends in time is never cancelled; the sweeper thread ends with its loop."""
    async def scenario():
        deadlines = Deadlines(0.2)
        outcomes = {}

        async def call(name: str, seconds: float):
            task = deadlines.watch()
            try:
                await asyncio.sleep(seconds)
                outcomes[name] = "done"
            except asyncio.CancelledError:
                outcomes[name] = "deadline" if deadlines.expired(task) else "cancelled"
                if outcomes[name] == "cancelled":
                    raise
                assert task.cancelling() == 0
            finally:
                deadlines.unwatch(task)

        fast, slow = asyncio.create_task(call("fast", 0.01)), asyncio.create_task(call("slow", 5))
        gone = asyncio.create_task(call("gone", 5))
        await asyncio.sleep(0.05)
        gone.cancel()
        await asyncio.gather(fast, slow, gone, return_exceptions=True)
        assert outcomes == {"fast": "done", "slow": "deadline", "gone": "cancelled"}
        assert not deadlines._due and not deadlines._expired
        return deadlines, deadlines._sweeper
    deadlines, sweeper = asyncio.run(scenario())
    sweeper.join(5)  # the sweeper thread ends with its loop
    assert not sweeper.is_alive() and deadlines._sweeper is None
