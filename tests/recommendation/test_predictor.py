"""The scoring step as a kserve.Model (OIP v2), called in-process with InferRequests, and the serving layer's batcher
without a server. (Building the predictor from the registry and serving it with kserve's ModelServer over OIP v2 gRPC
is tested in test_api.py, next to the trained models.)"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from kserve.errors import InvalidInput
from kserve.protocol.infer_type import InferInput, InferRequest

from services.recommendation.recommender import MODEL_FORMAT, REGISTRY_KIND, load_recommender
from services.recommendation.model import ModelConfig, build_model
from services.recommendation.predictor import RecommendationPredictor
from services.recommendation.serving import Batcher, build_loaded, rows_from

N = 37


def make_loaded(kind: str, n_items: int = N, dim: int = 8, seed: int = 0):
    """A randomly initialised model registered the way run_training registers one (no training needed)."""
    torch.manual_seed(seed)
    mcfg = ModelConfig(kind=kind, n_items=n_items, dim=dim, timesteps=50, sample_steps=5)
    tensors = {"popularity": torch.cat([torch.zeros(1), torch.randint(0, 50, (n_items,)).float()])}
    if kind != "popularity":
        tensors.update({f"model.{k}": v for k, v in build_model(mcfg).state_dict().items()})
    config = {"format": MODEL_FORMAT, "model_kind": kind, "model": mcfg.to_dict(),
              "item_ids": [f"m{i}" for i in range(n_items)], "seed": seed}
    row = {"kind": REGISTRY_KIND, "name": "recommender", "version": 3, "id": "00000000-0000-0000-0000-000000000003"}
    return build_loaded(tensors, config, row), load_recommender(tensors, config)


def _request(rows, k=None, exclude=None):
    width = max(len(r) for r in rows)
    flat = [x for r in rows for x in list(r) + [0] * (width - len(r))]
    inputs = [InferInput("history", [len(rows), width], "INT64", flat)]
    if k is not None:
        inputs.append(InferInput("k", [1], "INT32", [k]))
    if exclude is not None:
        inputs.append(InferInput("exclude_seen", [1], "BOOL", [exclude]))
    return InferRequest(model_name="recommendation", infer_inputs=inputs, request_id="r1")


@pytest.mark.parametrize("kind", ["preferdiff", "sasrec_ce", "popularity"])
@pytest.mark.parametrize("exclude", [False, True])
def test_predict_equals_the_domain_recommender(kind, exclude):
    loaded, rec = make_loaded(kind)
    pred = RecommendationPredictor("recommendation", loaded=loaded)
    rows = [[1, 5, 9], [N, 2], [], [4] * 12]
    resp = asyncio.run(pred.predict(_request(rows, k=N if exclude else 6, exclude=exclude)))
    out = {o.name: o.as_numpy() for o in resp.outputs}
    want = rec.recommend([[rec.item_ids[i - 1] for i in r] for r in rows], k=N if exclude else 6,
                         exclude_seen=exclude)
    assert out["item_index"].tolist() == want.item_indices.tolist()  # -1 in slots emptied by exclusion
    assert out["score"].tolist() == want.scores.tolist()
    text = [[x.decode() if isinstance(x, bytes) else x for x in r] for r in out["item_id"].tolist()]
    assert text == [[i or "" for i in r] for r in want.ids]
    assert out["fallback"].tolist() == [kind == "popularity", kind == "popularity", True, kind == "popularity"]
    assert resp.id == "r1" and resp.parameters["registry_version"] == "3"
    grpc_msg = resp.to_grpc()  # survives the OIP v2 gRPC encoding
    assert [o.name for o in grpc_msg.outputs] == ["item_index", "score", "item_id", "fallback"]


def test_defaults_are_k10_without_exclusion():
    loaded, rec = make_loaded("sasrec_ce")
    out = {o.name: o.as_numpy() for o in asyncio.run(RecommendationPredictor(
        "recommendation", loaded=loaded).predict(_request([[3, 4]]))).outputs}
    assert out["item_index"].tolist() == rec.recommend([["m2", "m3"]], k=10, exclude_seen=False).item_indices.tolist()


@pytest.mark.parametrize("make", [
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("other", [1], "INT64", [1])]),
    lambda: _request([[N + 1]]),
    lambda: _request([[-2]]),
    lambda: _request([[1]], k=0),
    lambda: _request([[1]], k=N + 1),
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("history", [1, 1], "FP32", [1.0])]),
    lambda: InferRequest(model_name="m", infer_inputs=[InferInput("history", [1, 1], "INT64", [1]),
                                                       InferInput("k", [2], "INT32", [1, 2])]),
    lambda: _request([[1] * 1001]),
])
def test_bad_inputs_are_invalid_input(make):
    loaded, _ = make_loaded("sasrec_ce")
    with pytest.raises(InvalidInput):
        asyncio.run(RecommendationPredictor("recommendation", loaded=loaded).predict(make()))


def test_batcher_answers_concurrent_requests_like_single_calls():
    """Different k and exclude_seen in one window: grouped per (model, exclude_seen), one forward each, every list
    cut to its own k; each equals the domain's answer for that request alone (ids exactly, scores to float32)."""
    loaded, rec = make_loaded("preferdiff", n_items=50)
    reqs = [([f"m{i}", f"m{(3 * i) % 50}"], 1 + i % 9, i % 2 == 0) for i in range(20)] + [([], 4, True)]

    async def run():
        b = Batcher(max_batch=64, max_wait_ms=20)
        try:
            out = await asyncio.gather(*(b.submit(loaded.rec, h, k, ex) for h, k, ex in reqs))
            return out, b.batches
        finally:
            await b.close()
    out, batches = asyncio.run(run())
    assert batches < len(reqs)
    for (h, k, ex), row in zip(reqs, out, strict=True):
        want = rows_from(rec, [h], [k], ex)[0]
        assert row.ids == want.ids and row.indices == want.indices and len(row.ids) == k
        assert np.allclose(row.scores, want.scores, rtol=1e-5, atol=1e-6)
        assert row.scored_by == ("empty_history" if not h else "model")
        if ex:
            assert not set(h) & set(row.ids)


def test_a_failing_item_fails_only_its_own_request():
    loaded, _ = make_loaded("sasrec_ce")
    other, _ = make_loaded("sasrec_ce", n_items=5)

    async def run():
        b = Batcher(max_batch=8, max_wait_ms=20)
        try:
            return await asyncio.gather(b.submit(loaded.rec, ["m1"], 3, False),
                                        b.submit(other.rec, ["m1"], 30, False),  # k > its catalogue: domain error
                                        return_exceptions=True)
        finally:
            await b.close()
    ok, bad = asyncio.run(run())
    assert len(ok.ids) == 3 and isinstance(bad, Exception)
