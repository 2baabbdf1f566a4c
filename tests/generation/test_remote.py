"""The remote backend (settings generation.remote_models) through the real gRPC server and interceptors, with
praxon's own OpenAI-compatible routes (services.generation.openai_api over a local Engine, on loopback) as the
upstream: Generate / GenerateStream answer what the upstream's engine generates, with logprobs; compression on a
remote model is FAILED_PRECONDITION naming the backend; upstream refusals map to the project's status codes."""
from __future__ import annotations

import socket
import uuid
from types import SimpleNamespace

import grpc
import pytest

from praxon.common.v1 import common_pb2
from praxon.generation.v1 import generation_pb2 as pb
from praxon.generation.v1 import generation_pb2_grpc
from services.generation.engine import Engine, SamplingParams
from services.generation.settings import GenerationConfig, RemoteModel
from tests import harness
from tests.generation.conftest import OpenAIServer, openai_service
from tests.harness import auth, rpc_error_details

PROMPT = "record : key kafo value 1 2 3 4 ; lookup : key"


@pytest.fixture(scope="module")
def remote(settings, llama, tokenizer):
    engine = Engine(llama, tokenizer, name="upstream").start()
    upstream = OpenAIServer(openai_service(engine, tokenizer, "upstream-lm"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once the socket is closed
    private = settings.model_copy(deep=True)
    private.generation = GenerationConfig(remote_models={
        "big": RemoteModel(base_url=f"http://127.0.0.1:{upstream.port}/v1", model="upstream-lm"),
        "down": RemoteModel(base_url=f"http://127.0.0.1:{closed}/v1", timeout_s=5)})
    server = harness.PlatformServer(private, ["platform", "generation"])
    _, token = harness.token_for(private, f"remote-{uuid.uuid4().hex[:6]}")
    channel = grpc.insecure_channel(server.address)
    try:
        yield SimpleNamespace(stub=generation_pb2_grpc.GenerationServiceStub(channel), md=auth(token), engine=engine,
                              tokenizer=tokenizer, base_url=f"http://127.0.0.1:{upstream.port}/v1")
    finally:
        channel.close()
        server.stop()
        upstream.stop()
        engine.stop()


def _request(prompt=PROMPT, name="big", cls=pb.GenerateRequest, **sampling):
    return cls(model=common_pb2.ModelRef(name=name), prompt=prompt, sampling=pb.SamplingParams(**sampling))


def _local(env, **sampling):
    return env.engine.generate(env.engine.encode(PROMPT), SamplingParams(**sampling))


def test_generate_through_the_remote_backend_equals_the_upstreams_engine(remote):
    resp = remote.stub.Generate(_request(max_new_tokens=8, ignore_eos=True, top_logprobs=2), metadata=remote.md,
                                timeout=60)
    events, fin = _local(remote, max_new_tokens=8, ignore_eos=True, logprobs=2)
    assert resp.text == fin.text and "".join(t.text for t in resp.tokens) == fin.text
    assert [t.logprob for t in resp.tokens] == pytest.approx([e.logprob for e in events], abs=1e-4)
    assert [[x.text for x in t.top_logprobs] for t in resp.tokens] == [[x for _, x, _ in e.top_logprobs]
                                                                       for e in events]
    assert resp.finish_reason == pb.FINISH_REASON_LENGTH
    assert resp.usage.completion_tokens == 8 and resp.usage.prompt_tokens == len(remote.engine.encode(PROMPT))
    assert resp.model.name == "big" and resp.model.model_type == "remote"


def test_stream_and_seeded_sampling_through_the_remote_backend(remote):
    stream = list(remote.stub.GenerateStream(_request(cls=pb.GenerateStreamRequest, max_new_tokens=10,
                                                      ignore_eos=True, temperature=1.0, top_p=0.9, seed=3),
                                             metadata=remote.md, timeout=60))
    _, fin = _local(remote, max_new_tokens=10, ignore_eos=True, temperature=1.0, top_p=0.9, seed=3)
    assert "".join(m.token.text for m in stream[:-1]) == fin.text and len(stream) == 11
    assert stream[-1].finish_reason == pb.FINISH_REASON_LENGTH and stream[-1].usage.completion_tokens == 10
    assert stream[0].model.name == "big"


def _error(call, req, md):
    with pytest.raises(grpc.RpcError) as err:
        call(req, metadata=md, timeout=30)
    code, info, bad, _ = rpc_error_details(err.value)
    return code, info, bad, err.value.details()


def test_compression_on_a_remote_model_is_failed_precondition_naming_the_backend(remote):
    for policy in (pb.CACHE_POLICY_VL_CACHE, pb.CACHE_POLICY_H2O, pb.CACHE_POLICY_STREAMING_LLM):
        req = _request(max_new_tokens=2)
        req.kv_compression.CopyFrom(pb.KvCompression(policy=policy, retention=0.5))
        code, info, _, details = _error(remote.stub.Generate, req, remote.md)
        assert code == grpc.StatusCode.FAILED_PRECONDITION and remote.base_url in details
        assert info.reason == "COMPRESSION_UNSUPPORTED_BY_BACKEND" and info.metadata["backend"] == remote.base_url
    req = _request(max_new_tokens=2, ignore_eos=True)
    req.kv_compression.CopyFrom(pb.KvCompression(policy=pb.CACHE_POLICY_NONE))  # no compression: fine
    assert len(remote.stub.Generate(req, metadata=remote.md, timeout=30).tokens) == 2


def test_upstream_refusals_map_to_status_codes(remote):
    code, _, bad, _ = _error(remote.stub.Generate, _request("lookup " * 400, max_new_tokens=2), remote.md)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "prompt"
    code, _, bad, _ = _error(remote.stub.Generate, _request(max_new_tokens=250), remote.md)  # past the context
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "sampling.max_new_tokens"
    code, _, bad, _ = _error(remote.stub.Generate, _request(temperature=-1.0), remote.md)  # checked here first
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "sampling.temperature"
    code, info, _, _ = _error(remote.stub.Generate, _request(name="down", max_new_tokens=2), remote.md)
    assert code == grpc.StatusCode.UNAVAILABLE and info.reason == "REMOTE_UNAVAILABLE"
    code, _, bad, _ = _error(remote.stub.Generate, pb.GenerateRequest(
        model=common_pb2.ModelRef(name="big", version=2), prompt="a"), remote.md)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and bad.field_violations[0].field == "model.version"
    code, info, _, _ = _error(remote.stub.CountTokens, pb.CountTokensRequest(model=common_pb2.ModelRef(name="big"),
                                                                             text="a"), remote.md)
    assert code == grpc.StatusCode.FAILED_PRECONDITION and info.reason == "UNSUPPORTED_BY_BACKEND"
