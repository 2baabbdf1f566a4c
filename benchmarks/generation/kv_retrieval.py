"""KV-cache compression on the built-in retrieval task: accuracy and KV bytes per request for none / vl_cache /
h2o / streaming_llm at retention 5, 10, 25, 50, 100%, mean over seeds, and decode tokens/s at 10% vs full.

    .venv/bin/python benchmarks/generation/kv_retrieval.py [--model DIR] [--save DIR] [--records 16] [--value-words 2]

--model: a Hugging Face directory (e.g. one written by a previous run with --save); otherwise a tiny Llama is
trained here first with the service's own training job on record documents only (TrainParams.builtin_tasks =
"records", 2..--train-records records per document, --lookups of their keys looked up, no document repeated). kvpress (NVIDIA's
presses) does not install beside transformers 5.24 (it pins transformers<5.3), so H2O and StreamingLLM are this
repository's own implementations (services/generation/kvpolicy.py).

Status (2026-12-04, shared 2-core CPU, benchmarks/generation/RESULTS.md): the tiny model learns the lookup once it
is first trained on copy documents (TrainParams.builtin_copy_docs / copy_warmup_steps, a curriculum); without them
no recipe did. The engine samples a request's first token from the prefill's own logits, before any compression, so
a one-word value is answered alike under every policy: the task here uses two-word values (--value-words 2), whose
second word is decoded through the compressed cache. On it (these defaults, 16 records) VL-Cache at 10% trails the
full cache by far and H2O too, while it beats StreamingLLM: the issue's claim (VL-Cache >= both at 10%, within a
few points of the full cache) is measured and not met on this task. The two-word recipe is fragile: with training
seed 0, or with up to 16 records per training document, the model did not learn the lookup in 5000-8000 steps.
"""
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


def train(args):
    """The service's training job on record documents only (TrainParams.builtin_tasks = "records"): every
    document is records then --lookups lookups (few: with all keys looked up the later ones are answered by
    elimination, a shortcut the evaluation prompt cannot use)."""
    from services.generation.params import TrainParams
    from services.generation.training import LanguageModelTraining

    # enough documents that no batch repeats one: with 5000 documents the model memorised them (training loss
    # below what the lookup allows, fresh prompts at chance)
    docs = min(200_000, args.train_steps * 32 + 2000)
    p = TrainParams(steps=args.train_steps, builtin_tasks="records", builtin_retrieval_docs=docs,
                    builtin_min_records=2, builtin_max_records=args.train_records, builtin_lookups=args.lookups,
                    builtin_copy_docs=int(docs * args.copy_fraction), copy_warmup_steps=args.copy_warmup,
                    builtin_value_words=args.value_words,
                    hidden_size=64, num_layers=2, num_heads=args.heads, batch_size=32, lr=args.lr,
                    init_std=args.init_std, max_seq_len=256, warmup_steps=100, seed=args.train_seed,
                    steps_per_checkpoint=10 ** 6)
    job = LanguageModelTraining(p)
    t = time.time()
    run_steps(InMemoryJobContext(params={}, kind="generation.train"), job, checkpoint_every=10 ** 6)
    print(f"trained {p.steps} steps in {time.time() - t:.0f}s, final loss {statistics.mean(job.losses[-50:]):.3f}")
    if args.save:
        job.model.save_pretrained(args.save)
        job.tokenizer.save_pretrained(args.save)
    return job.model.eval(), job.tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--save")
    ap.add_argument("--train-steps", type=int, default=6000)
    ap.add_argument("--train-records", type=int, default=8, help="most records per training document")
    ap.add_argument("--lookups", type=int, default=4, help="lookups per training document")
    ap.add_argument("--copy-fraction", type=float, default=0.3, help="copy documents, as a fraction of the records")
    ap.add_argument("--copy-warmup", type=int, default=1500, help="first steps on copy documents alone")
    ap.add_argument("--value-words", type=int, default=2, help="words per record value (the first comes from the "
                    "prefill, the rest from the compressed cache)")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--init-std", type=float, default=0.125, help="initial weight std (64 ** -0.5)")
    ap.add_argument("--train-seed", type=int, default=1, help="seed 0 did not learn two-word values (RESULTS.md)")
    ap.add_argument("--records", type=int, default=16, help="records per retrieval prompt")
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
        model, tok = train(args)
    engine = Engine(model, tok, max_running=64, max_queued=1024).start()
    m = len(engine.encode(corpus.retrieval_set(0, 1, args.records, args.value_words)[0].prompt))
    print(f"\nretrieval: {args.records} records of {args.value_words}-word values (~{m} prompt tokens), {args.n} "
          f"prompts x {args.seeds} seeds, window 4; right = the whole value")
    print(f"{'policy':14}" + "".join(f"{f'{r:.0%}':>16}" for r in RETENTIONS))
    table = {}
    for policy in POLICIES:
        cells = []
        for r in RETENTIONS:
            if policy == "none" and r < 1:
                cells.append(f"{'-':>16}")
                continue
            scores = [retrieval_accuracy(engine, policy, r, seed=s, n=args.n, n_records=args.records,
                                         value_words=args.value_words)
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
    prompts = [engine.encode(ex.prompt) for ex in corpus.retrieval_set(99, 16, args.records, args.value_words)]
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
