"""The continuous-batching engine against transformers' own generate, batching invariance, cancellation, sampling,
stop strings, the bounded queue, and KV-cache policies at full retention."""
from __future__ import annotations

import queue
import threading
import time

import pytest
import torch

from services.common.errors import ResourceExhausted
from services.generation import corpus
from services.generation.engine import Engine, Finished, Request, SamplingParams
from services.generation.kvpolicy import CachePolicy

PROMPTS = ["record : key kafo value 1 2 3 4 ; lookup", "question : where does",
           "fact : the person vomira lives in tulsek and works as a",
           corpus.retrieval_set(0, 1, 6)[0].prompt, "lookup : key"]


def _collect(q: queue.Queue, timeout: float = 120):
    events = []
    while True:
        e = q.get(timeout=timeout)
        if isinstance(e, Finished):
            return events, e
        events.append(e)


def _submit_all(engine, prompts, sampling, policy=None):
    policy = policy or CachePolicy()
    qs = []
    for p in prompts:
        q: queue.Queue = queue.Queue()
        engine.submit(Request(engine.encode(p), sampling, policy, q.put))
        qs.append(q)
    return [_collect(q) for q in qs]


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def engine(request, llama, gpt2, tokenizer):
    e = Engine(llama if request.param == "llama" else gpt2, tokenizer, max_running=32).start()
    yield e
    e.stop()


def test_greedy_equals_transformers_generate_for_mixed_lengths_batched_together(engine):
    sp = SamplingParams(max_new_tokens=10, ignore_eos=True, logprobs=3)
    results = _submit_all(engine, PROMPTS, sp)
    assert max(engine.batch_sizes) >= 2  # they really were decoded together
    for prompt, (events, fin) in zip(PROMPTS, results, strict=True):
        ids = torch.tensor([engine.encode(prompt)])
        ref = engine.model.generate(ids, max_new_tokens=10, do_sample=False, output_logits=True,
                                    return_dict_in_generate=True, eos_token_id=None,
                                    pad_token_id=engine.tokenizer.pad_token_id)
        want = ref.sequences[0, ids.shape[1]:].tolist()
        assert fin.token_ids == want == [e.token_id for e in events]
        ref_lp = torch.log_softmax(torch.stack([x[0] for x in ref.logits]).float(), -1)
        got = torch.tensor([e.logprob for e in events])
        torch.testing.assert_close(got, ref_lp[torch.arange(len(want)), want], atol=1e-4, rtol=0)
        top = [[i for i, _, _ in e.top_logprobs] for e in events]
        assert top == ref_lp.topk(3, dim=-1).indices.tolist()
        assert fin.finish_reason == "length" and fin.completion_tokens == 10
        assert fin.text == engine.tokenizer.decode(want, skip_special_tokens=True)


def test_sixteen_concurrent_requests_each_equal_their_solo_run(engine):
    prompts = [engine.encode(corpus.retrieval_set(s, 1, 1 + s % 7)[0].prompt) for s in range(16)]
    solo = [engine.generate(p, SamplingParams(max_new_tokens=6 + i % 5, ignore_eos=True))[1].token_ids
            for i, p in enumerate(prompts)]
    seen_batches = len(engine.batch_sizes)
    qs = []
    for i, p in enumerate(prompts):
        q: queue.Queue = queue.Queue()
        engine.submit(Request(p, SamplingParams(max_new_tokens=6 + i % 5, ignore_eos=True), CachePolicy(), q.put))
        qs.append(q)
    together = [_collect(q)[1].token_ids for q in qs]
    assert together == solo
    # they really were decoded together: some decode step advanced several of them at once
    assert max(list(engine.batch_sizes)[seen_batches:]) > 1


def test_a_cancelled_stream_frees_its_cache_and_does_not_disturb_the_others(engine):
    sp = SamplingParams(max_new_tokens=150, ignore_eos=True)
    others = [engine.generate(engine.encode(p), SamplingParams(max_new_tokens=20, ignore_eos=True))[1].token_ids
              for p in PROMPTS[:2]]
    freed_before = engine.freed_sequences
    long_q: queue.Queue = queue.Queue()
    req = engine.submit(Request(engine.encode(PROMPTS[2]), sp, CachePolicy(), long_q.put))
    oq = []
    for p in PROMPTS[:2]:
        q: queue.Queue = queue.Queue()
        engine.submit(Request(engine.encode(p), SamplingParams(max_new_tokens=20, ignore_eos=True), CachePolicy(),
                              q.put))
        oq.append(q)
    for _ in range(3):
        long_q.get(timeout=60)
    assert engine.stats()["cache_bytes"] > 0
    req.cancel()
    events, fin = _collect(long_q)
    assert fin.finish_reason == "cancelled" and fin.completion_tokens < 150
    assert [_collect(q)[1].token_ids for q in oq] == others
    time.sleep(0.05)
    st = engine.stats()
    assert st["running"] == 0 and st["cache_bytes"] == 0 and engine.freed_sequences == freed_before + 3


def test_seeded_sampling_reproduces(engine):
    ids = engine.encode(PROMPTS[1])
    sp = SamplingParams(max_new_tokens=12, temperature=1.0, top_k=50, top_p=0.9, seed=7, ignore_eos=True)
    a = engine.generate(ids, sp)[1].token_ids
    b = engine.generate(ids, sp)[1].token_ids
    c = engine.generate(ids, SamplingParams(max_new_tokens=12, temperature=1.0, seed=8, ignore_eos=True))[1]
    assert a == b and c.token_ids != a
    # top_k=1 sampling is greedy
    greedy = engine.generate(ids, SamplingParams(max_new_tokens=12, ignore_eos=True))[1].token_ids
    assert engine.generate(ids, SamplingParams(max_new_tokens=12, temperature=0.7, top_k=1, seed=1,
                                               ignore_eos=True))[1].token_ids == greedy


def test_stop_strings_end_generation_and_are_not_returned(engine):
    ids = engine.encode(PROMPTS[0])
    full = engine.generate(ids, SamplingParams(max_new_tokens=20, ignore_eos=True))[1]
    stop = full.text[3:6]
    events, fin = engine.generate(ids, SamplingParams(max_new_tokens=20, ignore_eos=True, stop=(stop,)))
    assert fin.finish_reason == "stop" and fin.text == full.text[: full.text.find(stop)]
    assert "".join(e.text for e in events) == fin.text


def test_alpha_one_equals_no_compression_exactly(engine):
    sp = SamplingParams(max_new_tokens=10, ignore_eos=True)
    ids = engine.encode(PROMPTS[3])
    ev0, f0 = engine.generate(ids, sp)
    assert f0.cache_bytes == f0.full_cache_bytes  # no compression keeps the whole cache
    for policy in ("vl_cache", "h2o", "streaming_llm"):
        ev, f = engine.generate(ids, sp, CachePolicy(policy, alpha=1.0))
        assert f.token_ids == f0.token_ids and [e.logprob for e in ev] == [e.logprob for e in ev0]
        assert f.kept_fraction == 1.0 and f.cache_bytes == f0.cache_bytes


@pytest.mark.parametrize("policy", ["vl_cache", "h2o", "streaming_llm"])
def test_compressed_budgets_sum_to_alpha_L_m(engine, policy):
    ids = engine.encode(PROMPTS[3])
    m, L = len(ids), engine.adapter.L
    _, f = engine.generate(ids, SamplingParams(max_new_tokens=4, ignore_eos=True), CachePolicy(policy, alpha=0.25))
    assert sum(f.budgets) == int(0.25 * L * m + 0.5)
    assert f.cache_bytes < f.full_cache_bytes and abs(f.kept_fraction - sum(f.budgets) / (L * m)) < 1e-9


def test_full_queue_is_resource_exhausted(tokenizer, llama):
    e = Engine(llama, tokenizer, max_running=1, max_queued=2)
    gate = threading.Event()
    e.submit(Request(e.encode(PROMPTS[0]), SamplingParams(max_new_tokens=200, ignore_eos=True), CachePolicy(),
                     lambda ev: gate.wait(5)))
    try:
        # the first one runs (its events block the engine), the next two wait
        deadline = time.monotonic() + 60
        while e.stats()["running"] < 1:
            assert time.monotonic() < deadline, "the first request was never admitted"
            time.sleep(0.01)
        for _ in range(2):
            e.submit(Request(e.encode(PROMPTS[1]), SamplingParams(max_new_tokens=2), CachePolicy(), lambda ev: None))
        with pytest.raises(ResourceExhausted) as err:
            e.submit(Request(e.encode(PROMPTS[1]), SamplingParams(max_new_tokens=2), CachePolicy(), lambda ev: None))
        assert err.value.retry_after_s > 0
    finally:
        gate.set()
        e.stop()
