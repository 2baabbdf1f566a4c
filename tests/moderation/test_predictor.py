"""The guard as a kserve.Model (OIP v2): request validation, before any model is touched, with the servicer's limits
(ServingConfig, checked by the ModerationEngine). (Its answers, through the same ModerationEngine as the servicer,
and their parity with ModerateBatch are tested in test_api.py, next to the trained models.)"""
from __future__ import annotations

import asyncio

import pytest
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferRequest

from services.common.serving import RefKey
from services.moderation.engine import ModerationEngine
from services.moderation.predictor import GuardPredictor
from services.moderation.settings import ServingConfig

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
