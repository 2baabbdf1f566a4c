"""What tritonclient (gRPC and HTTP) gets from `praxon predictor recommendation` beyond infer and metadata (issue
39): Triton's model config and repository index, and requests whose inputs do not match the declared specs refused
as 400 / INVALID_ARGUMENT naming the input, logged without a traceback. The predictor serves a popularity
recommender registered directly (no training), a subprocess on loopback; tritonclient runs in a process of its own
(tests/platform/tritonclient_probe.py). The moderation predictor's twin of this test is in
tests/moderation/test_predictor.py."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests import harness
from tests.platform.test_predictor_access import Served, _env, _free_port, _predictor_cmd, _register_popularity

PROBE = Path(__file__).with_name("tritonclient_probe.py")


def run_probe(http: int, grpc_port: int, token: str, model: str, cases: dict) -> dict:
    arg = json.dumps({"http": http, "grpc": grpc_port, "token": token, "model": model, "cases": cases})
    run = subprocess.run([sys.executable, str(PROBE), arg], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def config_tensors(config: dict, key: str) -> list[tuple[str, str, list[int]]]:
    """(name, data_type, dims) of a Triton config's inputs or outputs, over gRPC (protobuf JSON: int64 as strings,
    defaults left out) and HTTP alike."""
    return [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in config.get(key, [])]


@pytest.fixture(scope="module")
def predictor(settings, tmp_path_factory):
    from services.common.embedded import spawn

    tenant_id, token = harness.token_for(settings, f"predtriton-{uuid.uuid4().hex[:6]}")
    _register_popularity(settings, tenant_id)
    http, grpc_port = _free_port(), _free_port()
    log = tmp_path_factory.mktemp("predictor-triton") / "predictor.log"
    cmd = _predictor_cmd(tenant_id, http, grpc_port)
    cmd[3:3] = ["--log-level", "INFO"]  # (python -m services.cli.main --log-level INFO predictor ...)
    p = Served(spawn(cmd, log, env=_env(settings)), log, http, grpc_port)
    try:
        harness.wait_for(p.ready, timeout=120, interval=0.3, what="the predictor")
        p.token = token
        yield p
    finally:
        p.proc.terminate()
        p.proc.wait(20)


HISTORY = ["history", "INT64", [1, 2], [1, 2]]
CASES = {  # case -> inputs; a refused case names the input it refuses
    "fine": [HISTORY, ["k", "INT32", [1], [3]], ["exclude_seen", "BOOL", [1], [True]]],
    "1-D history": [["history", "INT64", [3], [1, 2, 3]]],
    "3-D history": [["history", "INT64", [1, 1, 2], [1, 2]]],
    "INT32 history": [["history", "INT32", [1, 2], [1, 2]]],
    "FP32 history": [["history", "FP32", [1, 2], [1.0, 2.0]]],
    "two k": [HISTORY, ["k", "INT32", [2], [3, 4]]],
    "INT64 k": [HISTORY, ["k", "INT64", [1], [3]]],
    "2-D exclude_seen": [HISTORY, ["exclude_seen", "BOOL", [1, 1], [True]]],
    "undeclared input": [HISTORY, ["extra", "FP32", [1], [1.0]]],
    "no history": [["k", "INT32", [1], [3]]],
}
REFUSED_NAMING = {"1-D history": "history", "3-D history": "history", "INT32 history": "history",
                  "FP32 history": "history", "two k": "'k'", "INT64 k": "'k'", "2-D exclude_seen": "exclude_seen",
                  "undeclared input": "extra", "no history": "history"}


def test_tritonclient_reads_model_config_and_repository_index(predictor):
    got = run_probe(predictor.http, predictor.grpc, predictor.token, "recommendation", {})
    for proto in ("grpc", "http"):
        config = got[proto]["config"]
        assert config["name"] == "recommendation" and int(config.get("max_batch_size", 0)) == 0, proto
        assert config_tensors(config, "input") == [("history", "TYPE_INT64", [-1, -1]), ("k", "TYPE_INT32", [1]),
                                                   ("exclude_seen", "TYPE_BOOL", [1])], proto
        assert config_tensors(config, "output") == [
            ("item_index", "TYPE_INT64", [-1, -1]), ("score", "TYPE_FP32", [-1, -1]),
            ("item_id", "TYPE_STRING", [-1, -1]), ("fallback", "TYPE_BOOL", [-1])], proto
        assert [bool(t.get("optional", False)) for t in config["input"]] == [False, True, True], proto
        assert [(m["name"], m["state"]) for m in got[proto]["index"]] == [("recommendation", "READY")], proto
    assert got["grpc"]["missing"][0] == "StatusCode.NOT_FOUND" and "no-such-model" in got["grpc"]["missing"][1]
    assert got["http"]["missing"][0] == "404" and "no-such-model" in got["http"]["missing"][1]


def test_inputs_that_do_not_match_the_declared_specs_are_refused_naming_them(predictor):
    got = run_probe(predictor.http, predictor.grpc, predictor.token, "recommendation", CASES)
    for proto, refused_status in (("grpc", "StatusCode.INVALID_ARGUMENT"), ("http", "400")):
        cases = got[proto]["cases"]
        assert cases["fine"] == {"outputs": ["fallback", "item_id", "item_index", "score"]}, (proto, cases["fine"])
        for case, names in REFUSED_NAMING.items():
            assert "error" in cases[case], (proto, case, cases[case])
            status, message = cases[case]["error"]
            assert status == refused_status and names in message, (proto, case, status, message)
    # a refusal is the caller's business: one INFO line each in the predictor's log, no ERROR, no traceback
    text = predictor.log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    assert not [line for line in text.splitlines() if " ERROR " in line], text[-3000:]
    refusals = [line for line in text.splitlines() if " INFO services.common.oip: refused " in line]
    assert len(refusals) >= 2 * len(REFUSED_NAMING), text[-3000:]


def test_repository_index_and_config_in_process():
    """The REST endpoints on an app of their own: the ready filter, a model not loaded, a versioned config path, and
    a body that is not a JSON object (400, never 500)."""
    import asyncio

    import httpx
    from fastapi import FastAPI
    from kserve.model_repository import ModelRepository

    from services.common import oip
    from services.common.oip import TensorSpec

    class Declared(oip.DeclaredModel):
        INPUTS = (TensorSpec("x", "FP32", (-1, 3)),)
        OUTPUTS = (TensorSpec("y", "FP64", (-1,)),)

    ready, loading = Declared("ready"), Declared("loading")
    ready.ready, loading.ready = True, False
    repo = ModelRepository()
    repo.update(ready)
    repo.update(loading)
    app = FastAPI()
    oip.install_error_handlers(app)
    oip.register_triton_endpoints(app, oip.ReadingDataPlane(model_registry=repo))

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as c:
            return [await c.post("/v2/repository/index", content=b""),
                    await c.post("/v2/repository/index", json={"ready": True}),
                    await c.post("/v2/repository/index", content=b"{"),
                    await c.post("/v2/repository/index", json=[1]),
                    await c.get("/v2/models/ready/versions/7/config"),
                    await c.get("/v2/models/nope/config")]
    every, only_ready, not_json, not_object, config, missing = asyncio.run(run())
    assert every.status_code == 200 and every.json() == [
        {"name": "loading", "version": "", "state": "UNAVAILABLE", "reason": "not loaded"},
        {"name": "ready", "version": "", "state": "READY", "reason": ""}]
    assert [m["name"] for m in only_ready.json()] == ["ready"]
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]
    assert not_object.status_code == 400 and "JSON object" in not_object.json()["error"]
    assert config.status_code == 200 and config.json() == {
        "name": "ready", "platform": "", "backend": "praxon", "max_batch_size": 0,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 3], "optional": False}],
        "output": [{"name": "y", "data_type": "TYPE_FP64", "dims": [-1]}]}
    assert missing.status_code == 404 and "nope" in missing.json()["error"]
