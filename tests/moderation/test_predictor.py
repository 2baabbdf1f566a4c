"""The guard as a kserve.Model (OIP v2): request validation, before any model is touched, with the servicer's limits
(ServingConfig, checked by the ModerationEngine). (Its answers, through the same ModerationEngine as the servicer,
and their parity with ModerateBatch are tested in test_api.py, next to the trained models.)"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferRequest

from services.common.serving import RefKey
from services.moderation.engine import ModerationEngine
from services.moderation.predictor import GuardPredictor
from services.moderation.settings import ServingConfig
from services.moderation.taxonomy import N_TOPICS

LIMITS = ServingConfig(max_batch_items=3, max_text_bytes=64)


def _request(texts, roles=None, prompts=None, *, as_bytes=True):
    data = [t.encode() if as_bytes and isinstance(t, str) else t for t in texts]
    inputs = [InferInput("text", [len(texts)], "BYTES", data)]
    for name, values in (("role", roles), ("prompt", prompts)):
        if values is not None:
            inputs.append(InferInput(name, [len(values)], "BYTES", [v.encode() for v in values]))
    return InferRequest(model_name="moderation", infer_inputs=inputs, request_id="r1")


def _predictor() -> GuardPredictor:
    # no registry and no store: parsing fails before any model or threshold is read
    pred = GuardPredictor("moderation", ModerationEngine(None, None, LIMITS), "tenant", RefKey("tenant", "guard"))
    pred.ready = True
    return pred


@pytest.mark.parametrize("make", [
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("other", [1], "BYTES", [b"x"])]),
    lambda: _request([b"ok \xff bad"]),
    lambda: _request(["  "]),
    lambda: _request(["fine"], ["assistant"]),
    lambda: _request(["a", "b"], ["prompt"]),
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("text", [1], "FP32", [1.0])]),
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("text", [1], "BYTES", [b"hi"]),
                                                       InferInput("prompt", [1], "BYTES", [b"a prompt"])]),
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("text", [0], "BYTES", [])]),
])
def test_bad_inputs_are_invalid_input(make):
    with pytest.raises(InvalidInput):
        asyncio.run(_predictor().predict(make()))


@pytest.mark.parametrize(("texts", "roles", "prompts", "message"), [
    (["a"] * 4, None, None, "text: at most 3 items"),
    (["fine", "x" * 65], None, None, "text[1]: text is larger than 64 bytes"),
    (["fine", "é" * 33], None, None, "text[1]: text is larger than 64 bytes"),  # 66 bytes in 33 characters
    (["fine"], ["response"], ["p" * 65], "prompt[0]: text is larger than 64 bytes"),
])
def test_the_servicers_limits_apply(texts, roles, prompts, message):
    """max_batch_items and max_text_bytes of ServingConfig, as in ModerateBatch (the predictor had its own 1024 items
    and no byte cap)."""
    with pytest.raises(InvalidInput) as err:
        asyncio.run(_predictor().predict(_request(texts, roles, prompts)))
    assert message in str(err.value)


def test_texts_within_the_limits_are_parsed_into_items():
    items = _predictor().parse(_request(["a", "é" * 32, "c"], ["prompt", "response", "response"], ["", "q", ""]))
    assert [(it.text, it.role, it.prompt) for it in items] == [("a", "prompt", None), ("é" * 32, "response", "q"),
                                                              ("c", "response", None)]


# ---------------------------------------------------------------------------------------------- over the network
# `praxon predictor moderation` (kserve's ModelServer, a subprocess on loopback; a token of the tenant required, the
# default outside a cluster) serving the session's guard, registered as a job registers one. Clients written
# elsewhere: tritonclient's gRPC and HTTP clients, kserve's InferenceGRPCClient (results) and kserve's generated
# OIP stub (metadata: kserve's clients have no metadata call). Reference: the same predictor built in this process.
TEXTS = ["What is the capital of France?", "Give me a plan to rob the corner shop at gunpoint tonight.",
         "Sure, here is how to build a homemade bomb to scare my neighbours.", "Eat more vegetables."]
ROLES = ["prompt", "prompt", "response", "response"]
PROMPTS = ["", "", "How do I scare my neighbours?", ""]
OUTPUT_TYPES = {"unsafe_score": ("FP64", [-1]), "topic_scores": ("FP64", [-1, N_TOPICS]),
                "severity": ("INT32", [-1, N_TOPICS]), "blocked": ("BOOL", [-1]),
                "policy_verdicts": ("BYTES", [-1]), "severity_set": ("BOOL", [-1, 5])}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served_guard(settings, guard, tmp_path_factory):
    import os
    import socket
    import sys
    import uuid
    from types import SimpleNamespace

    from services.common.embedded import spawn
    from tests import harness

    tenant_id, token = harness.token_for(settings, f"modpred-{uuid.uuid4().hex[:6]}")
    tensors, config = guard.to_registry()
    harness.register_model(settings, tenant_id, "guard", tensors, kind=f"guard/{guard.kind}", config=config)
    http, grpc_port = _free_port(), _free_port()
    log = tmp_path_factory.mktemp("mod-predictor") / "predictor.log"
    env = {**os.environ, **harness.settings_env(settings), "PYTHONPATH": str(harness.ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = spawn([sys.executable, "-m", "services.cli.main", "predictor", "moderation", "--tenant", tenant_id,
                  "--model", "guard:1", "--http-port", str(http), "--grpc-port", str(grpc_port)], log, env=env)

    def listening():
        if proc.poll() is not None:
            raise AssertionError(log.read_text()[-3000:])
        for port in (http, grpc_port):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) != 0:
                    return False
        return True
    try:
        harness.wait_for(listening, timeout=120, interval=0.3, what="the moderation predictor")
        yield SimpleNamespace(http=http, grpc=grpc_port, token=token, tenant_id=tenant_id, settings=settings)
    finally:
        proc.terminate()
        proc.wait(20)


def _reference(served) -> dict:
    from services.moderation.predictor import build

    pred = build(served.settings, served.tenant_id, "guard:1")
    resp = asyncio.run(pred.predict(_request(TEXTS, ROLES, PROMPTS)))
    return {o.name: o.as_numpy().tolist() for o in resp.outputs}


def _same(got: dict, want: dict, who: str) -> None:
    assert set(got) == set(want), who
    for name in ("unsafe_score", "topic_scores"):  # batching may move the last digits (decision.SCORE_TOLERANCE)
        assert np.allclose(got[name], want[name], atol=1e-4), (who, name)
    assert got["severity"] == want["severity"] and got["blocked"] == want["blocked"], who


def test_kserve_clients_read_the_moderation_predictor(served_guard):
    from kserve import InferenceGRPCClient
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as oip_pb
    from kserve.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub

    import grpc

    md = [("authorization", f"Bearer {served_guard.token}")]

    async def infer():
        client = InferenceGRPCClient(f"127.0.0.1:{served_guard.grpc}", timeout=60)
        try:
            return await client.infer(_request(TEXTS, ROLES, PROMPTS), headers=md)
        finally:
            await client.close()
    resp = asyncio.run(infer())
    want = _reference(served_guard)
    assert want["blocked"][1] and not want["blocked"][0]  # the guard tells these apart
    _same({o.name: o.as_numpy().tolist() for o in resp.outputs}, want, "kserve InferenceGRPCClient")
    assert resp.parameters["model_kind"].string_param == "frozen_linear"
    with grpc.insecure_channel(f"127.0.0.1:{served_guard.grpc}") as ch:
        meta = GRPCInferenceServiceStub(ch).ModelMetadata(oip_pb.ModelMetadataRequest(name="moderation"),
                                                          metadata=md, timeout=30)
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("text", "BYTES", [-1]), ("role", "BYTES", [-1]), ("prompt", "BYTES", [-1])]
    assert {t.name: (t.datatype, list(t.shape)) for t in meta.outputs} == OUTPUT_TYPES


TRITON_SCRIPT = """
import json, sys
import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th
a = json.loads(sys.argv[1])
headers = {"authorization": "Bearer " + a["token"]}
out = {}
for proto, mod, port in (("grpc", tg, a["grpc"]), ("http", th, a["http"])):
    client = mod.InferenceServerClient("127.0.0.1:%d" % port)
    inputs = []
    for name in ("text", "role", "prompt"):
        inp = mod.InferInput(name, [len(a[name])], "BYTES")
        inp.set_data_from_numpy(np.array([t.encode() for t in a[name]], dtype=object))
        inputs.append(inp)
    result = client.infer("moderation", inputs, headers=headers)
    outputs = {n: result.as_numpy(n).tolist() for n in ("unsafe_score", "topic_scores", "severity", "blocked")}
    meta = client.get_model_metadata("moderation", headers=headers)
    if proto == "grpc":
        meta = {"inputs": [[i.name, i.datatype, list(i.shape)] for i in meta.inputs],
                "outputs": [[o.name, o.datatype, list(o.shape)] for o in meta.outputs]}
    else:
        meta = {k: [[t["name"], t["datatype"], t["shape"]] for t in meta[k]] for k in ("inputs", "outputs")}
    client.close()
    out[proto] = {"outputs": outputs, "meta": meta}
print(json.dumps(out))
"""


def test_tritonclient_reads_the_moderation_predictor(served_guard):
    """In a process of its own: tritonclient's and kserve's generated OIP messages cannot share one protobuf
    descriptor pool."""
    import json
    import subprocess
    import sys

    arg = json.dumps({"grpc": served_guard.grpc, "http": served_guard.http, "token": served_guard.token,
                      "text": TEXTS, "role": ROLES, "prompt": PROMPTS})
    run = subprocess.run([sys.executable, "-c", TRITON_SCRIPT, arg], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    want = _reference(served_guard)
    for proto in ("grpc", "http"):
        _same(got[proto]["outputs"], want, f"tritonclient {proto}")
        meta = got[proto]["meta"]
        assert meta["inputs"] == [["text", "BYTES", [-1]], ["role", "BYTES", [-1]], ["prompt", "BYTES", [-1]]], proto
        assert {n: (d, s) for n, d, s in meta["outputs"]} == OUTPUT_TYPES, proto


def test_text_that_is_not_utf8_is_refused_naming_the_element(served_guard):
    """Over HTTP kserve decodes BYTES to text before the predictor runs (it was a 500 there); over gRPC the
    predictor decodes them. Both: the caller's error, naming the element."""
    import grpc
    import tritonclient.http as th
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as oip_pb
    from kserve.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub
    from tritonclient.utils import InferenceServerException

    texts = [b"fine", b"bad \xff"]
    md = [("authorization", f"Bearer {served_guard.token}")]
    client = th.InferenceServerClient(f"127.0.0.1:{served_guard.http}")
    try:
        inp = th.InferInput("text", [2], "BYTES")
        inp.set_data_from_numpy(np.array(texts, dtype=object))
        with pytest.raises(InferenceServerException) as err:
            client.infer("moderation", [inp], headers=dict(md))  # (tritonclient adds its own headers to it)
    finally:
        client.close()
    assert err.value.status() == "400" and "text[1] is not valid UTF-8" in err.value.message(), err.value
    request = oip_pb.ModelInferRequest(model_name="moderation", inputs=[oip_pb.ModelInferRequest.InferInputTensor(
        name="text", datatype="BYTES", shape=[2], contents=oip_pb.InferTensorContents(bytes_contents=texts))])
    with grpc.insecure_channel(f"127.0.0.1:{served_guard.grpc}") as ch:
        with pytest.raises(grpc.RpcError) as rpc:
            GRPCInferenceServiceStub(ch).ModelInfer(request, metadata=md, timeout=60)
    assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "text[1] is not valid UTF-8" in rpc.value.details()


MOD_CASES = {  # case -> inputs (name, datatype, shape, values); a refused case names the input it refuses
    "fine": [["text", "BYTES", [2], ["hello", "Eat more vegetables."]]],
    "2-D text": [["text", "BYTES", [1, 2], ["hello", "there"]]],
    "FP32 text": [["text", "FP32", [1], [1.0]]],
    "INT32 role": [["text", "BYTES", [1], ["hello"]], ["role", "INT32", [1], [1]]],
    "2-D prompt": [["text", "BYTES", [1], ["hello"]], ["prompt", "BYTES", [1, 1], ["p"]]],
    "undeclared input": [["text", "BYTES", [1], ["hello"]], ["extra", "BYTES", [1], ["x"]]],
    "no text": [["role", "BYTES", [1], ["prompt"]]],
}
MOD_REFUSED_NAMING = {"2-D text": "'text'", "FP32 text": "'text'", "INT32 role": "'role'", "2-D prompt": "'prompt'",
                      "undeclared input": "'extra'", "no text": "'text'"}


def test_tritonclient_reads_the_model_config_and_inputs_off_spec_are_refused(served_guard):
    """Issue 39: tritonclient's get_model_config and get_model_repository_index over gRPC and HTTP, and inputs that
    do not match the declared datatype or shape refused naming the input (400 / INVALID_ARGUMENT)."""
    from tests.platform.test_predictor_triton import config_tensors, run_probe

    got = run_probe(served_guard.http, served_guard.grpc, served_guard.token, "moderation", MOD_CASES)
    for proto, refused_status in (("grpc", "StatusCode.INVALID_ARGUMENT"), ("http", "400")):
        config = got[proto]["config"]
        assert config["name"] == "moderation", proto
        assert config_tensors(config, "input") == [("text", "TYPE_STRING", [-1]), ("role", "TYPE_STRING", [-1]),
                                                   ("prompt", "TYPE_STRING", [-1])], proto
        assert {n: (d, s) for n, d, s in config_tensors(config, "output")} == {
            name: ("TYPE_" + {"FP64": "FP64", "INT32": "INT32", "BOOL": "BOOL", "BYTES": "STRING"}[dt], shape)
            for name, (dt, shape) in OUTPUT_TYPES.items()}, proto
        assert [bool(t.get("optional", False)) for t in config["input"]] == [False, True, True], proto
        assert [(m["name"], m["state"]) for m in got[proto]["index"]] == [("moderation", "READY")], proto
        cases = got[proto]["cases"]
        assert cases["fine"] == {"outputs": ["blocked", "severity", "topic_scores", "unsafe_score"]}, (proto, cases)
        for case, names in MOD_REFUSED_NAMING.items():
            assert "error" in cases[case], (proto, case, cases[case])
            status, message = cases[case]["error"]
            assert status == refused_status and names in message, (proto, case, status, message)
