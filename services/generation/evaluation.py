"""Task accuracy of a served model under each KV-cache policy: the built-in corpus's retrieval (exact first word), and
two long-context tasks for a pretrained model (corpus.haystack_passkeys, corpus.haystack_codes). Gemma's tokenizer splits
numbers into digits, so only the first digit of a five-digit answer comes from the prefill's logits and the other four
are decoded through the (compressed) cache. Used by the benchmarks."""
from __future__ import annotations

import queue
from collections.abc import Callable
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


def _score(engine: Engine, prompts: list[str], policy: str, alpha: float, window: int, max_new_tokens: int,
           right: Callable[[int, str], bool], timeout_s: float) -> PolicyScore:
    """Submit every prompt at once (continuous batching), greedy; right(i, text) judges prompt i's continuation."""
    pol = CachePolicy(policy, alpha, window=window) if policy != "none" else CachePolicy()
    qs = []
    for prompt in prompts:
        q: queue.Queue = queue.Queue()
        engine.submit(Request(engine.encode(prompt), SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True),
                              pol, q.put))
        qs.append(q)
    hits, kept, full = 0, 0.0, 0.0
    for i, q in enumerate(qs):
        while not isinstance(e := q.get(timeout=timeout_s), Finished):
            pass
        if e.error is not None:
            raise e.error
        hits += right(i, e.text)
        kept += e.cache_bytes
        full += e.full_cache_bytes
    n = max(len(prompts), 1)
    return PolicyScore(policy, alpha, hits / n, kept / n, full / n)


def retrieval_accuracy(engine: Engine, policy: str, alpha: float, *, seed: int = 0, n: int = 40,
                       n_records: int = 24, window: int = 4, max_new_tokens: int | None = None,
                       value_words: int = 1) -> PolicyScore:
    """The built-in lookup task; right when the continuation starts with the whole value. The first word comes from
    the prefill's logits, before any compression (engine.py): with one-word values every policy answers alike, and
    only value_words > 1 asks the compressed cache for the rest."""
    examples = corpus.retrieval_set(seed, n, n_records, value_words)
    return _score(engine, [ex.prompt for ex in examples], policy, alpha, window, max_new_tokens or value_words + 1,
                  lambda i, text: " ".join(text.split()[:value_words]) == examples[i].answer, 300)


def task_accuracy(engine: Engine, examples: list[corpus.Example], policy: str, alpha: float, *, window: int = 8,
                  max_new_tokens: int = 7) -> PolicyScore:
    """A pretrained model's long-context task; right when the continuation, stripped, starts with the answer."""
    return _score(engine, [ex.prompt for ex in examples], policy, alpha, window, max_new_tokens,
                  lambda i, text: text.strip().startswith(examples[i].answer), 1800)
