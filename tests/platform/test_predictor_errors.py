"""What the predictors answer when something goes wrong (services/common/oip.py, shared by every predictor):
requests the server cannot read are 400 / INVALID_ARGUMENT naming the input, never 500 / INTERNAL; the project's
errors raised inside a predictor get the platform's gRPC codes with rich details and over HTTP 400/404/429/503
with Retry-After.

Part 1 serves test models that raise each project error through kserve's REST endpoints and gRPC servicer with
the predictors' error handlers, in this process. Part 2 sends unreadable requests to a real `praxon predictor
recommendation` (a popularity model registered directly, a subprocess on loopback) with plain HTTP, tritonclient's
HTTP client and raw gRPC."""
from __future__ import annotations

import asyncio
import json
import struct
import uuid

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.http as th
from kserve import Model
from kserve.errors import InvalidInput, invalid_input_handler
from kserve.model_repository import ModelRepository
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub
from tritonclient.utils import InferenceServerException

from services.common import oip
from services.common.client import status_details
from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, Unavailable
from tests import harness
from tests.platform.test_predictor_access import Served, _env, _free_port, _predictor_cmd, _register_popularity

# ---------------------------------------------------------------------------------------------- project errors
ERRORS = {  # model name -> (error raised in predict, HTTP status, Retry-After, gRPC code, retry delay)
    "invalid": (InvalidArgument("text[0]", "text is larger than 64 bytes"), 400, None,
                grpc.StatusCode.INVALID_ARGUMENT, None),
    "missing": (NotFound("no such thing"), 404, None, grpc.StatusCode.NOT_FOUND, None),
    "precondition": (FailedPrecondition("train one first", reason="MODEL_NOT_REGISTERED"), 400, None,
                     grpc.StatusCode.FAILED_PRECONDITION, None),
    "full": (ResourceExhausted("queue full", retry_after_s=2.5, reason="QUEUE_FULL"), 429, "3",
             grpc.StatusCode.RESOURCE_EXHAUSTED, 2.5),
    "loading": (Unavailable("loading", retry_after_s=1.0, reason="MODEL_LOADING"), 503, "1",
                grpc.StatusCode.UNAVAILABLE, 1.0),
}


class Raising(Model):
    """A model whose every request fails with one project error, as an engine's would inside a predictor."""

    def __init__(self, name: str, exc: Exception):
        super().__init__(name)
        self.exc, self.ready = exc, True

    async def predict(self, payload, headers=None, response_headers=None):
        raise self.exc


def _dataplane() -> oip.ReadingDataPlane:
    repo = ModelRepository()
    for name, (exc, *_) in ERRORS.items():
        repo.update(Raising(name, exc))
    return oip.ReadingDataPlane(model_registry=repo)


BODY = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hello"]}]}


def test_project_errors_over_http():
    from fastapi import FastAPI
    from kserve.protocol.rest.v2_endpoints import register_v2_endpoints

    app = FastAPI()
    register_v2_endpoints(app, _dataplane(), None)
    app.add_exception_handler(InvalidInput, invalid_input_handler)  # as kserve's RESTServer does
    oip.install_error_handlers(app)

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://predictor") as c:
            return {name: await c.post(f"/v2/models/{name}/infer", json=BODY) for name in ERRORS}
    got = asyncio.run(run())
    for name, (exc, status, retry_after, *_) in ERRORS.items():
        r = got[name]
        assert r.status_code == status, (name, r.text)
        assert r.headers.get("retry-after") == retry_after, name
        body = r.json()
        assert body["error"] == exc.message and body["reason"] == exc.reason, name
    assert got["invalid"].json()["violations"] == [{"field": "text[0]", "description": "text is larger than 64 bytes"}]


def test_project_errors_over_grpc():
    from kserve.protocol.grpc.servicer import InferenceServicer
    from kserve.protocol.grpc.grpc_predict_v2_pb2_grpc import add_GRPCInferenceServiceServicer_to_server

    request = pb.ModelInferRequest(inputs=[pb.ModelInferRequest.InferInputTensor(
        name="text", datatype="BYTES", shape=[1], contents=pb.InferTensorContents(bytes_contents=[b"hello"]))])

    async def run():
        server = grpc.aio.server(interceptors=[oip.StatusInterceptor()])
        add_GRPCInferenceServiceServicer_to_server(InferenceServicer(_dataplane(), None), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        out = {}
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = GRPCInferenceServiceStub(ch)
                for name in ERRORS:
                    request.model_name = name
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stub.ModelInfer(request, timeout=30)
                    out[name] = err.value
        finally:
            await server.stop(None)
        return out
    got = asyncio.run(run())
    for name, (exc, _, _, code, delay) in ERRORS.items():
        err = got[name]
        assert err.code() == code and err.details() == exc.message, (name, err)
        d = status_details(err)
        assert d["reason"] == exc.reason and d["retry_after_s"] == delay, name
    assert status_details(got["invalid"])["violations"] == [("text[0]", "text is larger than 64 bytes")]


# ---------------------------------------------------------------------------------------------- unreadable requests
@pytest.fixture(scope="module")
def predictor(settings, tmp_path_factory):
    from services.common.embedded import spawn

    tenant_id, token = harness.token_for(settings, f"prederr-{uuid.uuid4().hex[:6]}")
    _register_popularity(settings, tenant_id)
    http, grpc_port = _free_port(), _free_port()
    log = tmp_path_factory.mktemp("predictor-errors") / "predictor.log"
    p = Served(spawn(_predictor_cmd(tenant_id, http, grpc_port), log, env=_env(settings)), log, http, grpc_port)
    try:
        harness.wait_for(p.ready, timeout=120, interval=0.3, what="the predictor")
        p.token = token
        yield p
    finally:
        p.proc.terminate()
        p.proc.wait(20)


def _binary(inputs: list[tuple[dict, bytes]]) -> tuple[bytes, dict]:
    """A body in OIP's binary extension: the JSON header, then each input's bytes."""
    head = json.dumps({"inputs": [dict(spec, parameters={"binary_data_size": len(raw)}) for spec, raw in inputs]})
    return head.encode() + b"".join(raw for _, raw in inputs), {
        "Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"}


def _bytes_elements(*values: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


HISTORY = {"name": "history", "shape": [1, 2], "datatype": "INT64"}
NOT_UTF8 = _binary([({"name": "history", "shape": [2], "datatype": "BYTES"}, _bytes_elements(b"ok", b"bad \xff"))])
CASES = {  # name -> (body, headers, a piece of the error message)
    "not JSON": (b"hello", {"Content-Type": "application/json"}, "not JSON"),
    "a JSON array": (b"[1, 2]", {"Content-Type": "application/json"}, "Open Inference Protocol"),
    "no inputs": (b'{"id": "x"}', {"Content-Type": "application/json"}, "inputs"),
    "wrong datatype": (json.dumps({"inputs": [dict(HISTORY, datatype="FP32", data=[1.0, 2.0])]}).encode(),
                       {"Content-Type": "application/json"}, "history"),
    "data not fitting the shape": (json.dumps({"inputs": [dict(HISTORY, shape=[3, 2], data=[1, 2])]}).encode(),
                                   {"Content-Type": "application/json"}, "history"),
    "BYTES not UTF-8": (*NOT_UTF8, "history[1] is not valid UTF-8"),
    "binary size past the end": (NOT_UTF8[0][:-3], NOT_UTF8[1], "goes past the end"),
    "binary INT64 of 7 bytes": (*_binary([(HISTORY, b"\x01" * 7)]), "history"),
    "binary header not JSON": (b"{{{{", {"Inference-Header-Content-Length": "4",
                                         "Content-Type": "application/octet-stream"}, "format"),
    "binary header without inputs": (b'{"id":"x"}', {"Inference-Header-Content-Length": "10",
                                                    "Content-Type": "application/octet-stream"}, "inputs"),
    "header length not a number": (NOT_UTF8[0], {**NOT_UTF8[1], "Inference-Header-Content-Length": "abc"},
                                   "must be an integer"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_unreadable_http_requests_are_400_naming_the_problem(predictor, case):
    body, headers, says = CASES[case]
    r = httpx.post(f"http://127.0.0.1:{predictor.http}/v2/models/recommendation/infer", content=body,
                   headers={**headers, "Authorization": f"Bearer {predictor.token}"}, timeout=60)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"], r.text


def test_tritonclient_http_gets_400_for_bytes_that_are_not_utf8(predictor):
    client = th.InferenceServerClient(f"127.0.0.1:{predictor.http}")
    try:
        inp = th.InferInput("history", [1], "BYTES")
        inp.set_data_from_numpy(np.array([b"\xc3\x28"], dtype=object))  # binary by default
        with pytest.raises(InferenceServerException) as err:
            client.infer("recommendation", [inp], headers={"Authorization": f"Bearer {predictor.token}"})
        assert err.value.status() == "400", err.value
        assert "history[0] is not valid UTF-8" in err.value.message()
        # and the server still answers
        assert client.is_server_ready()
    finally:
        client.close()


@pytest.mark.parametrize(("raw", "shape"), [(b"\x01" * 12, [1, 2]), (b"\x01" * 16, [3, 2])])
def test_raw_grpc_contents_that_do_not_fit_are_invalid_argument(predictor, raw, shape):
    """kserve decodes raw_input_contents only when the predictor reads them: a size that is not a whole number of
    INT64s, or that does not fill the declared shape, is the caller's fault there too."""
    request = pb.ModelInferRequest(model_name="recommendation", raw_input_contents=[raw], inputs=[
        pb.ModelInferRequest.InferInputTensor(name="history", datatype="INT64", shape=shape)])
    with grpc.insecure_channel(f"127.0.0.1:{predictor.grpc}") as ch:
        with pytest.raises(grpc.RpcError) as err:
            GRPCInferenceServiceStub(ch).ModelInfer(request, metadata=[("authorization", f"Bearer {predictor.token}")],
                                                    timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    assert "history" in err.value.details()
