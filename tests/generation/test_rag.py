"""The RAG methods on a tiny Llama (services.generation.rag), in process: Speculative RAG's subsets (one passage per
k-means cluster, unique), its verifier score (the sum of the specified log terms, each recomputed alone), its drafts
decoded together by the engine's batching (engine steps, not wall time); Sparse RAG with every passage kept equals
standard RAG under the block-diagonal attention mask (transformers' own forward), a dropped passage's cache gets no
attention weight and cannot change the answer."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from services.generation import rag
from services.generation.engine import Engine
from tests.generation.conftest import tiny_llama

QUESTION = "lookup : key kafo value"


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(tokenizer, seed=21, context=1024)


@pytest.fixture(scope="module")
def engine(model, tokenizer):
    e = Engine(model, tokenizer, name="rag-test").start()
    yield e
    e.stop()


def _passages(n: int, seed: int = 0) -> list[rag.Passage]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        v = rng.normal(size=8).astype(np.float32)
        out.append(rag.Passage(f"d{i}", f"record : key k{i} value {i % 7} {i % 3} ;", embedding=v / np.linalg.norm(v)))
    return out


@pytest.mark.parametrize("n,k,m,seed", [(10, 2, 5, 0), (10, 3, 5, 1), (7, 2, 8, 2), (4, 2, 10, 3), (10, 1, 3, 4)])
def test_every_subset_has_one_passage_per_cluster_and_subsets_are_unique(n, k, m, seed):
    emb = np.stack([p.embedding for p in _passages(n, seed)])
    subsets, labels = rag.kmeans_subsets(emb, k, m, seed)
    clusters = set(labels.tolist())
    assert len(clusters) == k
    sizes = [int((labels == c).sum()) for c in clusters]
    assert len(subsets) == min(m, math.prod(sizes))
    assert len(set(subsets)) == len(subsets)
    for s in subsets:
        assert sorted(labels[list(s)].tolist()) == sorted(clusters)  # exactly one passage of every cluster


def _logp(model, ids: list[int], target: int) -> float:
    with torch.inference_mode():
        return float(torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)[target])


def test_verifier_score_is_the_sum_of_the_specified_log_terms(model, tokenizer):
    drafts = [("v 1 2", "key kafo has value 1 2"), ("3", "")]
    got = rag.verify(model, tokenizer, QUESTION, drafts)  # one batched pass over padded rows
    for (a, b), (sc, sr) in zip(drafts, got, strict=True):
        segs = rag.verifier_segments(tokenizer, QUESTION, a, b)
        seq, want_sc, want_sr = [], 0.0, 0.0
        for name, toks in segs:  # every term recomputed alone from its exact prefix, unbatched
            for t in toks:
                if name in ("alpha", "beta"):
                    want_sc += _logp(model, seq, t)
                elif name == "yes":
                    want_sr += _logp(model, seq, t)
                seq.append(t)
        assert sc == pytest.approx(want_sc, abs=1e-3)
        assert sr == pytest.approx(want_sr, abs=1e-4)
        assert sr < 0 and sc < 0
    d = rag.DraftScore(["a"], "x", "y", -1.5, got[0][0], got[0][1])
    assert d.log_score == pytest.approx(-1.5 + got[0][0] + got[0][1])


def test_speculative_drafts_are_decoded_together_and_the_best_score_wins(engine, model, tokenizer):
    ps = _passages(10)
    before = list(engine.batch_sizes)
    res = rag.speculative_rag(engine, model, tokenizer, QUESTION, ps, m=5, k=2, seed=0, max_new_tokens=12)
    toks = res.info["completion_tokens"]
    assert len(res.drafts) == 5
    # concurrency, counted in engine steps: one decode step advances every running draft, so the steps taken are
    # about the longest draft's tokens, far fewer than the sum of all drafts' tokens
    assert res.info["draft_steps"] < sum(toks)
    assert res.info["draft_steps"] <= max(toks) + len(toks)
    assert max(list(engine.batch_sizes)[len(before):]) >= 2
    scores = [d.log_score for d in res.drafts]
    assert scores[0] == max(scores)  # the chosen draft comes first
    assert res.answer == res.drafts[0].answer and res.used == res.drafts[0].doc_ids
    for d in res.drafts:
        assert d.log_score == pytest.approx(d.log_draft + d.log_sc + d.log_sr)


def test_sparse_rag_with_every_passage_kept_equals_block_diagonal_standard_rag(engine, model):
    ps = _passages(4)
    trace: dict = {}
    res = rag.sparse_rag(engine, QUESTION, ps, keep=[True] * 4, max_new_tokens=6, trace=trace)
    pre, docs, q = rag.sparse_segments(engine, QUESTION, ps)
    ref_tokens, ref_logits = rag.block_diagonal_reference(model, pre, docs, q, 6, engine.eos_ids)
    n = len(trace["token_ids"])
    assert trace["token_ids"] == ref_tokens[:n]
    torch.testing.assert_close(trace["logits"][:len(ref_logits)], ref_logits[:len(trace["logits"])],
                               rtol=1e-4, atol=1e-4)
    assert res.used == [p.doc_id for p in ps]
    # ... and differs from ordinary (full causal) standard RAG: the mask matters
    with torch.inference_mode():
        full = model(input_ids=torch.tensor([pre + [t for d in docs for t in d] + q])).logits[0, -1].float()
    assert (full - ref_logits[0]).abs().max() > 1e-3


def test_a_dropped_passage_gets_no_attention_and_cannot_change_the_answer(engine):
    ps = _passages(4)
    keep = [True, False, True, False]
    trace: dict = {}
    res = rag.sparse_rag(engine, QUESTION, ps, keep=keep, max_new_tokens=5, trace=trace)
    dropped = set(trace["dropped_positions"])
    assert dropped and not dropped & set(trace["context_positions"])  # its cache is not among the keys at all
    for step in trace["weights"]:  # the attention rows of the question and of every decoded token, per layer
        for w in step:
            assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)))  # all mass on preamble + kept + own tokens
    assert res.used == ["d0", "d2"]
    # rewriting the dropped passages changes nothing; rewriting a kept one does
    def same_length(p):  # another text of the same token count (positions after it stay where they were)
        n = len(engine.tokenizer(rag._doc_line(1, p), add_special_tokens=False)["input_ids"])
        for c in (f"record : key zz{i} value {j} ;" for i in range(20) for j in range(10)):
            if len(engine.tokenizer(rag._doc_line(1, rag.Passage("", c)), add_special_tokens=False)["input_ids"]) == n:
                return rag.Passage(p.doc_id, c)
        raise AssertionError("no replacement of the same length")
    other = [same_length(p) if not k else p for p, k in zip(ps, keep, strict=True)]
    assert [o.text != p.text for o, p in zip(other, ps, strict=True)] == [not k for k in keep]
    t2: dict = {}
    rag.sparse_rag(engine, QUESTION, other, keep=keep, max_new_tokens=5, trace=t2)
    torch.testing.assert_close(t2["logits"], trace["logits"])
    changed = [rag.Passage(p.doc_id, "zz " * 12 if i == 0 else p.text) for i, p in enumerate(ps)]
    t3: dict = {}
    rag.sparse_rag(engine, QUESTION, changed, keep=keep, max_new_tokens=5, trace=t3)
    assert (t3["logits"][0] - trace["logits"][0]).abs().max() > 1e-4


def test_sparse_rating_keeps_the_passages_above_the_threshold(engine):
    ps = _passages(5)
    res = rag.sparse_rag(engine, QUESTION, ps, threshold=0.5, max_new_tokens=3)
    rel = [r.relevance for r in res.ratings]
    assert all(0 < r < 1 for r in rel)
    best = int(np.argmax(rel))
    assert [r.kept for r in res.ratings] == [r >= 0.5 or i == best for i, r in enumerate(rel)]
    assert res.used == [r.doc_id for r in res.ratings if r.kept]
    only_best = rag.sparse_rag(engine, QUESTION, ps, threshold=1.0, max_new_tokens=3)
    assert only_best.used == [ps[best].doc_id]


def test_standard_rag_answers_through_the_engine(engine, tokenizer):
    ps = _passages(3)
    res = rag.standard_rag(engine, QUESTION, ps, max_new_tokens=4)
    ids = engine.encode(rag.standard_prompt(QUESTION, ps))
    _, fin = engine.generate(ids, __import__("services.generation.engine", fromlist=["x"]).SamplingParams(
        max_new_tokens=4, stop=rag.STOPS))
    assert res.answer == rag.first_line(fin.text)
    assert res.used == ["d0", "d1", "d2"]


@pytest.mark.gemma
@pytest.mark.skipif(__import__("services.generation.pretrained", fromlist=["x"]).missing() is not None,
                    reason="the Gemma 3 270M wheels are not installed")
def test_sparse_rag_on_gemma_past_its_sliding_window_equals_transformers():
    """Gemma 3 (QK-norm, two RoPEs, sliding-window layers of 512): Sparse RAG's own forward over one passage of ~1,000
    tokens (block-diagonal = causal with one passage) gives transformers' logits at every step."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from services.generation import pretrained

    path = pretrained.hf_directory(Path(__file__).resolve().parents[2] / ".praxon" / "models")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    eng = Engine(model, tok, name="gemma-rag")
    text = " ".join(f"Line {i}: the lamp in room {i} is {'red' if i % 3 else 'blue'}." for i in range(60))
    ps = [rag.Passage("long", text)]
    q = "What colour is the lamp in room 7?"
    trace: dict = {}
    rag.sparse_rag(eng, q, ps, keep=[True], max_new_tokens=3, trace=trace)
    pre, docs, qi = rag.sparse_segments(eng, q, ps)
    seq = pre + docs[0] + qi
    assert len(seq) > 2 * 512
    n = len(trace["logits"])
    with torch.inference_mode():
        ref = model(input_ids=torch.tensor([seq + trace["token_ids"][:n - 1]])).logits[0, -n:].float()
    torch.testing.assert_close(trace["logits"], ref, rtol=1e-3, atol=1e-3)
