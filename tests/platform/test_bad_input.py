"""Bad input gets INVALID_ARGUMENT naming the field, never INTERNAL; random messages never crash a server."""
from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from google.protobuf import descriptor

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.common.v1 import common_pb2
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from tests.harness import auth, rpc_error_details


@pytest.fixture(scope="module")
def channel(platform):
    return grpc.insecure_channel(platform.address)


def violation(err: grpc.RpcError) -> list[str]:
    code, info, bad, _ = rpc_error_details(err)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, err.details())
    assert info is not None and info.domain == "praxon.dev"
    return [v.field for v in bad.field_violations]


CASES = [
    ("unknown enum value", lambda c: jobs_pb2_grpc.JobServiceStub(c).ListJobs,
     jobs_pb2.ListJobsRequest(states=[common_pb2.JOB_STATE_SUCCEEDED, 99]), "states[1]"),
    ("unspecified enum value", lambda c: jobs_pb2_grpc.JobServiceStub(c).ListJobs,
     jobs_pb2.ListJobsRequest(states=[common_pb2.JOB_STATE_UNSPECIFIED]), "states[0]"),
    ("empty job id", lambda c: jobs_pb2_grpc.JobServiceStub(c).GetJob, jobs_pb2.GetJobRequest(), "job_id"),
    ("non-UUID job id", lambda c: jobs_pb2_grpc.JobServiceStub(c).CancelJob,
     jobs_pb2.CancelJobRequest(job_id="42; drop table jobs"), "job_id"),
    ("malformed page token", lambda c: jobs_pb2_grpc.JobServiceStub(c).ListJobs,
     jobs_pb2.ListJobsRequest(page_token="not-a-token"), "page_token"),
    ("page size too large", lambda c: jobs_pb2_grpc.JobServiceStub(c).ListJobs,
     jobs_pb2.ListJobsRequest(page_size=100000), "page_size"),
    ("steps out of range", lambda c: jobs_pb2_grpc.JobServiceStub(c).StartSelfTestJob,
     jobs_pb2.StartSelfTestJobRequest(steps=0), "steps"),
    ("unprintable idempotency key", lambda c: jobs_pb2_grpc.JobServiceStub(c).StartSelfTestJob,
     jobs_pb2.StartSelfTestJobRequest(steps=1, idempotency_key="key\x00"), "idempotency_key"),
    ("oversize message", lambda c: jobs_pb2_grpc.JobServiceStub(c).StartSelfTestJob,
     jobs_pb2.StartSelfTestJobRequest(steps=1, idempotency_key="k" * (1024 * 1024 + 10)), "idempotency_key"),
    ("missing model name", lambda c: models_pb2_grpc.ModelRegistryServiceStub(c).GetModelVersion,
     models_pb2.GetModelVersionRequest(), "model.name"),
    ("negative version", lambda c: models_pb2_grpc.ModelRegistryServiceStub(c).GetModelVersion,
     models_pb2.GetModelVersionRequest(model=common_pb2.ModelRef(name="m", version=-1)), "model.version"),
    ("bad alias", lambda c: models_pb2_grpc.ModelRegistryServiceStub(c).SetAlias,
     models_pb2.SetAliasRequest(name="m", alias="Prod uction", version=1), "alias"),
    ("malformed model page token", lambda c: models_pb2_grpc.ModelRegistryServiceStub(c).ListModels,
     models_pb2.ListModelsRequest(page_token="%%%"), "page_token"),
    ("bad sha256", lambda c: artifacts_pb2_grpc.ArtifactServiceStub(c).CreateUpload,
     artifacts_pb2.CreateUploadRequest(name="x", sha256="abc"), "sha256"),
    ("bad content type", lambda c: artifacts_pb2_grpc.ArtifactServiceStub(c).CreateUpload,
     artifacts_pb2.CreateUploadRequest(name="x", sha256="a" * 64, content_type="text/\n"), "content_type"),
    ("non-UUID artifact id", lambda c: artifacts_pb2_grpc.ArtifactServiceStub(c).GetArtifact,
     artifacts_pb2.GetArtifactRequest(artifact_id="nope"), "artifact_id"),
]


@pytest.mark.parametrize("name,method,request_msg,field", CASES, ids=[c[0] for c in CASES])
def test_bad_input_names_the_field(channel, tenants, name, method, request_msg, field):
    with pytest.raises(grpc.RpcError) as err:
        method(channel)(request_msg, metadata=auth(tenants["a"][1]))
    assert field in violation(err.value)


def test_upload_with_wrong_sha256_is_rejected_and_nothing_is_lost(channel, tenants):
    stub = artifacts_pb2_grpc.ArtifactServiceStub(channel)
    md = auth(tenants["a"][1])
    kept = stub.UploadArtifact(iter([artifacts_pb2.UploadArtifactRequest(name="kept", chunk=b"hello")]),
                               metadata=md).artifact
    with pytest.raises(grpc.RpcError) as err:
        stub.UploadArtifact(iter([artifacts_pb2.UploadArtifactRequest(name="x", chunk=b"data", sha256="0" * 64)]),
                            metadata=md)
    assert violation(err.value) == ["sha256"]
    assert stub.GetArtifact(artifacts_pb2.GetArtifactRequest(artifact_id=kept.id), metadata=md).artifact.sha256 == \
        kept.sha256


# ---- property test: random messages at every RPC of every service ------------------------------------------
def _all_rpcs():
    """Every method of every hosted praxon service (the platform's areas, and each area in catalog.names())."""
    import importlib
    import pkgutil

    import praxon
    from services import catalog

    platform_areas = {"jobs", "models", "artifacts"}
    out = []
    for info in pkgutil.walk_packages(praxon.__path__, "praxon."):
        if not info.name.endswith("_pb2"):
            continue
        area = info.name.split(".")[1]
        if area in catalog.names() or area in platform_areas:
            for svc in importlib.import_module(info.name).DESCRIPTOR.services_by_name.values():
                out += [(svc.full_name, m) for m in svc.methods]
    return sorted(out, key=lambda r: (r[0], r[1].name))


FD = descriptor.FieldDescriptor


def message_strategy(desc: descriptor.Descriptor, depth: int = 0):
    """Random instances of a message type, including unknown enum numbers, odd strings and huge ints."""
    fields = {}
    for f in desc.fields:
        if f.message_type is not None:
            if f.message_type.GetOptions().map_entry or depth > 2 or f.message_type.full_name.startswith("google."):
                continue
            value = message_strategy(f.message_type, depth + 1)
        elif f.type == FD.TYPE_STRING:
            value = st.one_of(st.text(max_size=40), st.uuids().map(str), st.just(""), st.just("production"))
        elif f.type == FD.TYPE_BYTES:
            value = st.binary(max_size=64)
        elif f.type == FD.TYPE_BOOL:
            value = st.booleans()
        elif f.type == FD.TYPE_ENUM:
            value = st.integers(-3, 12)
        elif f.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
            value = st.floats(allow_nan=True, allow_infinity=True, width=32)
        elif f.type in (FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64):
            value = st.integers(-(2 ** 63), 2 ** 63 - 1)
        elif f.type in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
            value = st.integers(0, 2 ** 32 - 1)
        elif f.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
            value = st.integers(0, 2 ** 64 - 1)
        else:
            value = st.integers(-(2 ** 31), 2 ** 31 - 1)
        fields[f.name] = st.lists(value, max_size=3) if f.is_repeated else st.one_of(st.none(), value)
    cls = _message_class(desc)

    def build(values):
        msg = cls()
        for name, v in values.items():
            if v is None:
                continue
            f = desc.fields_by_name[name]
            if f.is_repeated:
                target = getattr(msg, name)
                for item in v:
                    target.add().CopyFrom(item) if f.message_type else target.append(item)
            elif f.message_type is not None:
                getattr(msg, name).CopyFrom(v)
            else:
                setattr(msg, name, v)
        return msg
    return st.fixed_dictionaries(fields).map(build)


def _message_class(desc):
    from google.protobuf import message_factory
    return message_factory.GetMessageClass(desc)


RPCS = _all_rpcs()


@pytest.fixture(scope="module")
def every_service(settings):
    """Every service on a database and broker of their own, with a tenant: the random requests that parse start
    real jobs, and no other module's worker must spend its time on them (nothing here runs them)."""
    from services import catalog
    from tests import harness
    with harness.private_platform(settings) as private:
        _, token = harness.token_for(private, "fuzz")
        server = harness.PlatformServer(private, catalog.names())
        yield grpc.insecure_channel(server.address), token
        server.stop()


@pytest.mark.parametrize("service,method", RPCS, ids=[f"{s.rsplit('.', 1)[1]}.{m.name}" for s, m in RPCS])
@hsettings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_random_messages_never_internal(every_service, service, method, data):
    request = data.draw(message_strategy(method.input_type))
    path = f"/{service}/{method.name}"
    de = _message_class(method.output_type).FromString
    channel, token = every_service
    md = auth(token)
    try:
        if method.client_streaming:
            stream = channel.stream_unary if not method.server_streaming else channel.stream_stream
            result = stream(path, request_serializer=lambda m: m.SerializeToString(),
                            response_deserializer=de)(iter([request, request]), metadata=md, timeout=10)
            if method.server_streaming:
                for _ in result:
                    pass
        elif method.server_streaming:
            for _ in channel.unary_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=de)(request, metadata=md, timeout=3):
                pass
        else:
            channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=de)(
                request, metadata=md, timeout=10)
    except grpc.RpcError as err:
        assert err.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (method.name, request,
                                                                                    err.details())
