"""KV-cache compression on the built-in retrieval task: accuracy and KV bytes per request for none / vl_cache /
h2o / streaming_llm at retention 5, 10, 25, 50, 100%, mean over seeds, and decode tokens/s at 10% vs full.

    .venv/bin/python benchmarks/generation/kv_retrieval.py [--model DIR] [--train-steps 4000] [--records 12]

--model: a Hugging Face directory (e.g. one written by a previous run with --save); otherwise a tiny Llama is
trained here first with the service's own recipe (services.generation.training). kvpress (NVIDIA's presses) does not
install beside transformers 5.24 (it pins transformers<5.3), so H2O and StreamingLLM are this repository's own
implementations (services/generation/kvpolicy.py).

Status (first run, 2 shared CPU cores): a 2-layer width-64 Llama trained 4000 steps on the built-in corpus answered
8.3% of 12-record lookups with the full cache, i.e. about 1/12: it copies *a* value from the context but has not
learned which one (no induction head formed in that budget). Every policy then scores the same, so this table does
not yet separate VL-Cache from H2O and StreamingLLM; tests/generation/test_kvpolicy.py checks the selection property
on constructed attention instead. A second run (6 records, 2000 steps, benchmarks/generation/RESULTS.md) was at
chance too (1/6). A longer run (or a larger model, or a GPU) is needed for the accuracy claim."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from services.common.jobcontext import InMemoryJobContext, run_steps
from services.generation import corpus
from services.generation.engine import Engine, SamplingParams
from services.generation.evaluation import retrieval_accuracy
from services.generation.kvpolicy import CachePolicy

POLICIES = ("none", "vl_cache", "h2o", "streaming_llm")
RETENTIONS = (0.05, 0.10, 0.25, 0.50, 1.0)


def train(steps: int, records: int, save: str | None):
    from services.generation.params import TrainParams
    from services.generation.training import LanguageModelTraining

    p = TrainParams(steps=steps, builtin_retrieval_docs=3000, builtin_max_records=records, hidden_size=64,
                    num_layers=2, batch_size=16, lr=2e-3, max_seq_len=192, warmup_steps=20,
                    steps_per_checkpoint=10 ** 6)
    job = LanguageModelTraining(p)
    t = time.time()
    run_steps(InMemoryJobContext(params={}, kind="generation.train"), job, checkpoint_every=10 ** 6)
    print(f"trained {steps} steps in {time.time() - t:.0f}s, final loss {statistics.mean(job.losses[-50:]):.3f}")
    if save:
        job.model.save_pretrained(save)
        job.tokenizer.save_pretrained(save)
    return job.model.eval(), job.tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--save")
    ap.add_argument("--train-steps", type=int, default=4000)
    ap.add_argument("--records", type=int, default=12, help="records per retrieval prompt")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(args.model, use_safetensors=True).eval()
        tok = AutoTokenizer.from_pretrained(args.model)
    else:
        model, tok = train(args.train_steps, args.records, args.save)
    engine = Engine(model, tok, max_running=64, max_queued=1024).start()
    m = len(engine.encode(corpus.retrieval_set(0, 1, args.records)[0].prompt))
    print(f"\nretrieval: {args.records} records (~{m} prompt tokens), {args.n} prompts x {args.seeds} seeds, window 4")
    print(f"{'policy':14}" + "".join(f"{f'{r:.0%}':>16}" for r in RETENTIONS))
    table = {}
    for policy in POLICIES:
        cells = []
        for r in RETENTIONS:
            if policy == "none" and r < 1:
                cells.append(f"{'-':>16}")
                continue
            scores = [retrieval_accuracy(engine, policy, r, seed=s, n=args.n, n_records=args.records)
                      for s in range(args.seeds)]
            acc = statistics.mean(s.accuracy for s in scores)
            kb = statistics.mean(s.kept_bytes for s in scores) / 1024
            table[(policy, r)] = acc
            cells.append(f"{acc:7.3f} {kb:6.1f}KiB")
        print(f"{policy:14}" + "".join(cells))
    full = table[("none", 1.0)]
    if full > 0:
        print("\naccuracy relative to the full cache at 10%: " + ", ".join(
            f"{p} {table[(p, 0.10)] / full:.2f}" for p in POLICIES[1:]))
    # decode speed at 10% vs full (same prompts, 32 new tokens each, batched)
    prompts = [engine.encode(ex.prompt) for ex in corpus.retrieval_set(99, 16, args.records)]
    for label, pol in (("full", CachePolicy()), ("vl_cache 10%", CachePolicy("vl_cache", 0.1, window=4))):
        t = time.time()
        import queue

        from services.generation.engine import Finished, Request
        qs = []
        for ids in prompts:
            q: queue.Queue = queue.Queue()
            engine.submit(Request(ids, SamplingParams(max_new_tokens=32, ignore_eos=True), pol, q.put))
            qs.append(q)
        n = 0
        for q in qs:
            while not isinstance(q.get(timeout=300), Finished):
                n += 1
        print(f"decode {label:13}: {n / (time.time() - t):7.1f} tokens/s (16 concurrent, 32 tokens each)")
    engine.stop()


if __name__ == "__main__":
    main()
