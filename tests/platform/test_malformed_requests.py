"""Bytes and values no well-behaved client sends, at every method of every hosted service (unary and streaming,
health and reflection included): undecodable bodies, truncated messages, nesting past protobuf's limit, NUL
characters and non-finite Struct numbers get INVALID_ARGUMENT naming the field, never UNKNOWN or INTERNAL, and
no exception class name leaks into the details."""
import random

import grpc
import pytest
from google.protobuf import struct_pb2

from tests.harness import auth, rpc_error_details
from tests.platform.test_bad_input import RPCS, _message_class, message_strategy  # noqa: F401

EXTRA = [("grpc.health.v1.Health", "Check", False, False), ("grpc.health.v1.Health", "Watch", False, True),
         ("grpc.reflection.v1alpha.ServerReflection", "ServerReflectionInfo", True, True)]
METHODS = [(s, m.name, m.client_streaming, m.server_streaming) for s, m in RPCS] + EXTRA


@pytest.fixture(scope="module")
def every_service(settings):
    from services import catalog
    from tests.harness import PlatformServer
    server = PlatformServer(settings, catalog.names())
    yield grpc.insecure_channel(server.address)
    server.stop()


def _call(channel, service, method, client_streaming, server_streaming, body: bytes, md):
    path = f"/{service}/{method}"
    kw = dict(request_serializer=lambda b: b, response_deserializer=lambda b: b)
    if client_streaming:
        call = (channel.stream_stream if server_streaming else channel.stream_unary)(path, **kw)
        result = call(iter([body]), metadata=md, timeout=10)
    else:
        call = (channel.unary_stream if server_streaming else channel.unary_unary)(path, **kw)
        result = call(body, metadata=md, timeout=10)
    if server_streaming:
        for _ in result:
            pass


def _deep_list(depth: int) -> bytes:
    """A Value nested `depth` ListValues deep, encoded by hand (protobuf refuses to build one past its limit)."""
    v = struct_pb2.Value(number_value=1.0).SerializeToString()
    for _ in range(depth):
        lst = b"\x0a" + _varint(len(v)) + v      # ListValue.values (field 1)
        v = b"\x32" + _varint(len(lst)) + lst     # Value.list_value (field 6)
    return v


BODIES = {
    "one byte e4": b"\xe4",
    "random bytes": bytes(random.Random(0).getrandbits(8) for _ in range(64)),
    "truncated varint": b"\x08\xff\xff",
    "truncated length": b"\x0a\x10ab",
    "wrong wire type": b"\x0d\x01",
}


@pytest.mark.parametrize("body", list(BODIES), ids=list(BODIES))
@pytest.mark.parametrize("service,method,cs,ss", METHODS, ids=[f"{s.rsplit('.', 1)[1]}.{m}" for s, m, _, _ in METHODS])
def test_undecodable_bodies_are_invalid_argument(every_service, tenants, service, method, cs, ss, body):
    # none of the bodies parses as any request type: every method must refuse it as INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as caught:
        _call(every_service, service, method, cs, ss, BODIES[body], auth(tenants["a"][1]))
    err = caught.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err.code(), err.details())
    assert "class" not in (err.details() or "") and "Error" not in (err.details() or ""), err.details()
    _, info, bad, _ = rpc_error_details(err)
    assert info.reason == "MALFORMED_REQUEST" and bad.field_violations[0].field == "request"


def test_the_minimal_case_from_the_report(every_service, tenants):
    with pytest.raises(grpc.RpcError) as e:
        _call(every_service, "praxon.jobs.v1.JobService", "GetJob", False, False, b"\xe4", auth(tenants["a"][1]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid praxon.jobs.v1.GetJobRequest" in e.value.details()


def _struct_field(msg_cls):
    return next((f for f in msg_cls.DESCRIPTOR.fields if f.message_type is not None
                 and f.message_type.full_name == "google.protobuf.Struct"), None)


STRUCT_RPCS = [(s, m) for s, m in RPCS if _struct_field(_message_class(m.input_type)) is not None]


@pytest.mark.parametrize("service,method", STRUCT_RPCS, ids=[f"{s.rsplit('.', 1)[1]}.{m.name}" for s, m in STRUCT_RPCS])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
def test_non_finite_struct_numbers_name_the_field(every_service, tenants, service, method, value):
    cls = _message_class(method.input_type)
    field = _struct_field(cls)
    req = cls()
    getattr(req, field.name).update({"lr": value})
    with pytest.raises(grpc.RpcError) as e:
        _call(every_service, service, method.name, method.client_streaming, method.server_streaming,
              req.SerializeToString(), auth(tenants["a"][1]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert rpc_error_details(e.value)[2].field_violations[0].field == f"{field.name}.lr"


def _string_field(msg_cls):
    return next((f for f in msg_cls.DESCRIPTOR.fields if f.type == f.TYPE_STRING and not f.is_repeated), None)


STRING_RPCS = [(s, m) for s, m in RPCS if _string_field(_message_class(m.input_type)) is not None]


@pytest.mark.parametrize("service,method", STRING_RPCS, ids=[f"{s.rsplit('.', 1)[1]}.{m.name}" for s, m in STRING_RPCS])
def test_a_nul_character_in_any_string_names_the_field(every_service, tenants, service, method):
    cls = _message_class(method.input_type)
    field = _string_field(cls)
    req = cls(**{field.name: "a\x00b"})
    with pytest.raises(grpc.RpcError) as e:
        _call(every_service, service, method.name, method.client_streaming, method.server_streaming,
              req.SerializeToString(), auth(tenants["a"][1]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert rpc_error_details(e.value)[2].field_violations[0].field == field.name


def test_nesting_past_the_protobuf_limit_is_invalid_argument(every_service, tenants):
    # a Struct-carrying field holding a Value nested past protobuf's limit (several services take Struct params)
    assert STRUCT_RPCS, "no hosted method takes a Struct: this test would check nothing"
    service, method = STRUCT_RPCS[0]
    field = _struct_field(_message_class(method.input_type))
    inner = _deep_list(80)
    entry = b"\x0a\x01x\x12" + _varint(len(inner)) + inner          # map entry: key "x", value <deep Value>
    struct = b"\x0a" + _varint(len(entry)) + entry                    # Struct.fields
    body = bytes([(field.number << 3) | 2]) + _varint(len(struct)) + struct
    with pytest.raises(grpc.RpcError) as e:
        _call(every_service, service, method.name, method.client_streaming, method.server_streaming, body,
              auth(tenants["a"][1]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out
