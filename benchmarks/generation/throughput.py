"""Throughput and time to first token of the continuous-batching engine at concurrency 1, 8, 32 vs transformers'
`generate` on the same model and prompts, run sequentially and as one left-padded static batch.

    .venv/bin/python benchmarks/generation/throughput.py [--model DIR] [--new-tokens 32] [--threads 2]

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


@torch.no_grad()
def hf_sequential(model, tok, prompts, new_tokens):
    t0, ttft, n = time.monotonic(), [], 0
    for ids in prompts:
        x = torch.tensor([ids])
        model(x)  # the prefill alone ~ time to first token of a sequential server
        ttft.append(time.monotonic() - t0)
        out = model.generate(x, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                             pad_token_id=tok.pad_token_id)
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
    t0 = time.monotonic()
    out = model.generate(x, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                         pad_token_id=tok.pad_token_id)
    dt = time.monotonic() - t0
    return (out.shape[1] - m) * len(prompts) / dt, dt  # every request's first token comes with the batch's end


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = model_and_tokenizer(args.model)
    engine = Engine(model, tok, max_running=64, max_queued=1024).start()
    print(f"{'concurrency':>11} {'engine tok/s':>13} {'seq tok/s':>10} {'static tok/s':>13} {'engine/seq':>10} "
          f"{'engine/static':>13} {'TTFT eng':>9} {'TTFT seq':>9} {'TTFT static':>11}")
    for c in (1, 8, 32):
        prompts = [engine.encode(corpus.retrieval_set(i, 1, 4 + (i * 7) % 20)[0].prompt) for i in range(c)]
        e_tps, e_ttft = engine_run(engine, prompts, args.new_tokens)
        s_tps, s_ttft = hf_sequential(model, tok, prompts, args.new_tokens)
        b_tps, b_ttft = hf_static(model, tok, prompts, args.new_tokens)
        print(f"{c:>11} {e_tps:13.1f} {s_tps:10.1f} {b_tps:13.1f} {e_tps / s_tps:10.2f} {e_tps / b_tps:13.2f} "
              f"{e_ttft:9.3f} {s_ttft:9.3f} {b_ttft:11.3f}")
    engine.stop()


if __name__ == "__main__":
    main()
