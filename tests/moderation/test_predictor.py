"""The guard as a kserve.Model (OIP v2): request validation, before any model is touched. (Its answers, through the
same ModerationEngine as the servicer, and their parity with Moderate are tested in test_api.py, next to the
trained models.)"""
from __future__ import annotations

import asyncio

import pytest
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferRequest

from services.common.serving import RefKey
from services.moderation.predictor import GuardPredictor


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


@pytest.mark.parametrize("make", [
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("other", [1], "BYTES", [b"x"])]),
    lambda: _request([b"ok \xff bad"]),
    lambda: _request(["  "]),
    lambda: _request(["fine"], ["assistant"]),
    lambda: _request(["a", "b"], ["prompt"]),
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("text", [1], "FP32", [1.0])]),
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("text", [1], "BYTES", [b"hi"]),
                                                       InferInput("prompt", [1], "BYTES", [b"a prompt"])]),
])
def test_bad_inputs_are_invalid_input(make):
    pred = GuardPredictor("moderation", None, "tenant", RefKey("tenant", "guard"))
    pred.ready = True  # parsing fails before the engine is used
    with pytest.raises(InvalidInput):
        asyncio.run(pred.predict(make()))
