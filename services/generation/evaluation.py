"""Task accuracy of a served model under each KV-cache policy: the built-in corpus's retrieval (exact first word), and
two long-context tasks for a pretrained model (corpus.haystack_passkeys, corpus.haystack_codes). Gemma's tokenizer splits
numbers into digits, so only the first digit of a five-digit answer comes from the prefill's logits and the other four
are decoded through the (compressed) cache. Used by the benchmarks."""
from __future__ import annotations

import queue
from dataclasses import dataclass

from services.generation import corpus
from services.generation.engine import Engine, Finished, Request, SamplingParams
from services.generation.kvpolicy import CachePolicy


@dataclass
class PolicyScore:
    policy: str
    alpha: float
    accuracy: float
    kept_bytes: float      # mean KV bytes held per request
    full_bytes: float      # mean KV bytes of the full cache


def retrieval_accuracy(engine: Engine, policy: str, alpha: float, *, seed: int = 0, n: int = 40,
                       n_records: int = 24, window: int = 4, max_new_tokens: int | None = None,
                       value_words: int = 1) -> PolicyScore:
    """All n prompts are submitted at once (continuous batching); greedy; right when the continuation starts with
    the whole value. The first word comes from the prefill's logits, before any compression (engine.py): with
    one-word values every policy answers alike, and only value_words > 1 asks the compressed cache for the rest."""
    examples = corpus.retrieval_set(seed, n, n_records, value_words)
    max_new_tokens = max_new_tokens or value_words + 1
    pol = CachePolicy(policy, alpha, window=window) if policy != "none" else CachePolicy()
    qs = []
    for ex in examples:
        q: queue.Queue = queue.Queue()
        engine.submit(Request(engine.encode(ex.prompt), SamplingParams(max_new_tokens=max_new_tokens,
                                                                       ignore_eos=True), pol, q.put))
        qs.append(q)
    right, kept, full = 0, 0.0, 0.0
    for ex, q in zip(examples, qs, strict=True):
        while not isinstance(e := q.get(timeout=300), Finished):
            pass
        if e.error is not None:
            raise e.error
        right += " ".join(e.text.split()[:value_words]) == ex.answer
        kept += e.cache_bytes
        full += e.full_cache_bytes
    return PolicyScore(policy, alpha, right / n, kept / n, full / n)


def task_accuracy(engine: Engine, examples: list[corpus.Example], policy: str, alpha: float, *, window: int = 8,
                  max_new_tokens: int = 7) -> PolicyScore:
    """All prompts submitted at once (continuous batching); greedy; right when the continuation, stripped, starts
    with the answer."""
    pol = CachePolicy(policy, alpha, window=window) if policy != "none" else CachePolicy()
    qs = []
    for ex in examples:
        q: queue.Queue = queue.Queue()
        engine.submit(Request(engine.encode(ex.prompt), SamplingParams(max_new_tokens=max_new_tokens,
                                                                       ignore_eos=True), pol, q.put))
        qs.append(q)
    right, kept, full = 0, 0.0, 0.0
    for ex, q in zip(examples, qs, strict=True):
        while not isinstance(e := q.get(timeout=1800), Finished):
            pass
        if e.error is not None:
            raise e.error
        right += e.text.strip().startswith(ex.answer)
        kept += e.cache_bytes
        full += e.full_cache_bytes
    n = max(len(examples), 1)
    return PolicyScore(policy, alpha, right / n, kept / n, full / n)
