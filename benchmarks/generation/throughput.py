"""Throughput and time to first token of the continuous-batching engine at concurrency 1, 8, 32 vs transformers'
`generate` on the same model and prompts, run sequentially and as one left-padded static batch.

    .venv/bin/python benchmarks/generation/throughput.py [--model DIR] [--new-tokens 32] [--threads 2] [--repeats 3]

Without --model a random tiny Llama (width 128, 4 layers) is used: throughput does not depend on what it learned."""
from __future__ import annotations

import argparse
import queue
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from services.generation import corpus
from services.generation.engine import Engine, Finished, Request, SamplingParams
from services.generation.kvpolicy import CachePolicy


def model_and_tokenizer(path: str | None):
    if path:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return AutoModelForCausalLM.from_pretrained(path, use_safetensors=True).eval(), AutoTokenizer.from_pretrained(path)
    from transformers import LlamaConfig, LlamaForCausalLM

    from services.generation.training import train_tokenizer
    tok = train_tokenizer(corpus.builtin_corpus(0, n_retrieval=300, qa_repeats=1), 512)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(cfg).eval(), tok


def engine_run(engine, prompts, new_tokens):
    t0 = time.monotonic()
    qs = []
    for ids in prompts:
        q: queue.Queue = queue.Queue()
        engine.submit(Request(ids, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True), CachePolicy(), q.put))
        qs.append(q)
    ttft, n = [], 0
    for q in qs:
        while not isinstance(e := q.get(timeout=600), Finished):
            n += 1
        ttft.append(e.time_to_first_token_s)
    return n / (time.monotonic() - t0), sum(ttft) / len(ttft)


class _FirstToken:
    """A generate() streamer that notes when the first new token arrives (its first put() is the prompt)."""

    def __init__(self):
        self.puts, self.at = 0, None

    def put(self, value):
        self.puts += 1
        if self.puts == 2:
            self.at = time.monotonic()

    def end(self):
        pass


@torch.no_grad()
def hf_sequential(model, tok, prompts, new_tokens):
    """One request at a time, all submitted at t0: a request's TTFT includes waiting for the ones before it."""
    t0, ttft, n = time.monotonic(), [], 0
    for ids in prompts:
        x = torch.tensor([ids])
        first = _FirstToken()
        out = model.generate(x, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                             pad_token_id=tok.pad_token_id, streamer=first)
        ttft.append(first.at - t0)
        n += out.shape[1] - x.shape[1]
    return n / (time.monotonic() - t0), sum(ttft) / len(ttft)


@torch.no_grad()
def hf_static(model, tok, prompts, new_tokens):
    m = max(len(p) for p in prompts)
    x = torch.full((len(prompts), m), tok.pad_token_id)
    mask = torch.zeros_like(x)
    for i, p in enumerate(prompts):
        x[i, m - len(p):] = torch.tensor(p)
        mask[i, m - len(p):] = 1
    first = _FirstToken()
    t0 = time.monotonic()
    out = model.generate(x, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                         pad_token_id=tok.pad_token_id, streamer=first)
    dt = time.monotonic() - t0
    # streamed, every request's first token comes after the one prefill of the whole padded batch
    return (out.shape[1] - m) * len(prompts) / dt, first.at - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="runs per cell; the best is reported")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = model_and_tokenizer(args.model)
    engine = Engine(model, tok, max_running=64, max_queued=1024).start()
    warm = [engine.encode(corpus.retrieval_set(0, 1, 4)[0].prompt)]
    engine_run(engine, warm * 2, 4), hf_sequential(model, tok, warm, 4), hf_static(model, tok, warm * 2, 4)  # warm-up
    print(f"{'concurrency':>11} {'engine tok/s':>13} {'seq tok/s':>10} {'static tok/s':>13} {'engine/seq':>10} "
          f"{'engine/static':>13} {'TTFT eng':>9} {'TTFT seq':>9} {'TTFT static':>11}")
    for c in (1, 8, 32):
        prompts = [engine.encode(corpus.retrieval_set(i, 1, 4 + (i * 7) % 20)[0].prompt) for i in range(c)]
        runs = {"e": [], "s": [], "b": []}
        for _ in range(args.repeats):  # interleaved, so all three see the same background load
            runs["e"].append(engine_run(engine, prompts, args.new_tokens))
            runs["s"].append(hf_sequential(model, tok, prompts, args.new_tokens))
            runs["b"].append(hf_static(model, tok, prompts, args.new_tokens))
        # best of the repeats (highest tok/s, lowest TTFT): on a shared machine the slower runs measure the others
        (e_tps, e_ttft), (s_tps, s_ttft), (b_tps, b_ttft) = (
            (max(r[0] for r in runs[k]), min(r[1] for r in runs[k])) for k in "esb")
        print(f"{c:>11} {e_tps:13.1f} {s_tps:10.1f} {b_tps:13.1f} {e_tps / s_tps:10.2f} {e_tps / b_tps:13.2f} "
              f"{e_ttft:9.3f} {s_ttft:9.3f} {b_ttft:11.3f}")
    engine.stop()


if __name__ == "__main__":
    main()
