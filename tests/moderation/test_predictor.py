"""The guard as a kserve.Model (OIP v2), called in-process with InferRequests. (Building it from the registry, as
`praxon predictor moderation` does, is tested in test_api.py, next to the trained models.)"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferRequest

from services.moderation.decision import Thresholds, moderate_batch
from services.moderation.predictor import GuardPredictor
from tests.moderation.test_api import TEXTS


def _request(texts, roles=None, *, as_bytes=True):
    data = [t.encode() if as_bytes and isinstance(t, str) else t for t in texts]
    inputs = [InferInput("text", [len(texts)], "BYTES", data)]
    if roles is not None:
        inputs.append(InferInput("role", [len(roles)], "BYTES", [r.encode() for r in roles]))
    return InferRequest(model_name="moderation", infer_inputs=inputs, request_id="r1")


def _outputs(resp):
    return {o.name: o.as_numpy() for o in resp.outputs}


def _check_equal(out, want):
    assert out["unsafe_score"].tolist() == [r.unsafe_score for r in want]
    assert out["topic_scores"].tolist() == [[t.score for t in r.topics] for r in want]
    assert out["severity"].tolist() == [[t.severity for t in r.topics] for r in want]
    assert out["blocked"].tolist() == [r.blocked for r in want]


def test_predict_equals_the_domain_answer(guard):
    pred = GuardPredictor("moderation", guard=guard)
    roles = ["prompt", "response"] * (len(TEXTS) // 2) + ["prompt"] * (len(TEXTS) % 2)
    resp = asyncio.run(pred.predict(_request(TEXTS, roles)))
    out = _outputs(resp)
    assert out["topic_scores"].shape == (len(TEXTS), 11) and out["severity"].dtype == np.int32
    _check_equal(out, moderate_batch(guard, TEXTS, roles, Thresholds()))
    assert resp.model_version == guard.version and resp.id == "r1"
    # roles default to "prompt"; text given as str works too
    out2 = _outputs(asyncio.run(pred.predict(_request(TEXTS[:2], as_bytes=False))))
    _check_equal(out2, moderate_batch(guard, TEXTS[:2], ["prompt", "prompt"], Thresholds()))
    # the response survives the OIP v2 gRPC encoding
    grpc_msg = resp.to_grpc()
    assert grpc_msg.model_name == "moderation" and [o.name for o in grpc_msg.outputs] == [
        "unsafe_score", "topic_scores", "severity", "blocked"]


@pytest.mark.parametrize("make", [
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("other", [1], "BYTES", [b"x"])]),
    lambda: _request([b"ok \xff bad"]),
    lambda: _request(["  "]),
    lambda: _request(["fine"], ["assistant"]),
    lambda: _request(["a", "b"], ["prompt"]),
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("text", [1], "FP32", [1.0])]),
])
def test_bad_inputs_are_invalid_input(guard, make):
    with pytest.raises(InvalidInput):
        asyncio.run(GuardPredictor("moderation", guard=guard).predict(make()))
