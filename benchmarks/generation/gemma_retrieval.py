"""Long-context retrieval on Gemma 3 270M (the pretrained model the "gemma" extra installs): accuracy and KV bytes
per request for none / vl_cache / h2o / streaming_llm at several retentions, on passkey retrieval and multi-key
lookup (services/generation/corpus.py), at several context lengths and haystack seeds; then decode tokens/s and
time to first token at the longest length, full cache vs VL-Cache at 10%. Everything runs through the service's own
engine (services/generation/engine.py) in this process.

    .venv/bin/python benchmarks/generation/gemma_retrieval.py [--fillers 20 40 80] [--n 40] [--seeds 0 1]
        [--retentions 0.05 0.1 0.25 0.5] [--tasks passkey multikey] [--cache .praxon/models] [--threads 1]

--fillers: filler lines per prompt (about 27 tokens each: 20 -> ~560 tokens, 40 -> ~1100, 80 -> ~2200). Gemma 3's
sliding layers hold at most 511 tokens, so past ~512 tokens only its 3 global layers hold the whole prompt.
H2O and StreamingLLM here are this repository's implementations (services/generation/kvpolicy.py). kvpress, the
outside reference, pins transformers < 5.3 and so runs in its own virtual environment on the same model and
questions: kvpress_reference.py.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from services.generation import corpus, evaluation, pretrained
from services.generation.engine import Engine, SamplingParams
from services.generation.kvpolicy import CachePolicy

TASKS = {"passkey": corpus.haystack_passkeys, "multikey": corpus.haystack_codes}


def load(cache: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = pretrained.hf_directory(cache)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


class PrefillMemo:
    """The model, with its prompt forward passes remembered by prompt: every cell of the table asks the same
    questions, and the engine's prefill (the same forward whatever the policy; the policy only reads its cache and
    hidden states, never changes them) is most of the time on a CPU. The answers are the same as without it; the
    speed table below runs without it."""

    def __init__(self, model):
        self._model, self._memo = model, {}

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __call__(self, input_ids, **kw):
        key = tuple(input_ids[0].tolist())
        if key not in self._memo:
            self._memo[key] = self._model(input_ids, **{**kw, "output_hidden_states": True})
        return self._memo[key]

    def clear(self) -> None:
        self._memo.clear()


def speed(engine: Engine, prompt: str, policy: CachePolicy, new_tokens: int = 64) -> tuple[float, float]:
    """(time to first token s, decode tokens/s after it) for one request alone."""
    t0 = time.perf_counter()
    events, fin = engine.generate(engine.encode(prompt), SamplingParams(max_new_tokens=new_tokens, ignore_eos=True),
                                  policy)
    total = time.perf_counter() - t0
    ttft = fin.time_to_first_token_s
    return ttft, (len(fin.token_ids) - 1) / max(total - ttft, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fillers", type=int, nargs="+", default=[20, 40, 80])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--retentions", type=float, nargs="*", default=[0.05, 0.10, 0.25, 0.50],
                    help="none given: only the full cache (to find the lengths where it is right)")
    ap.add_argument("--policies", nargs="+", default=["vl_cache", "h2o", "streaming_llm"])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--cache", default=".praxon/models", help="where the GGUF and its dequantised copy are kept")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-running", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if (why := pretrained.missing()) is not None:
        raise SystemExit(why)
    model, tok = load(args.cache)
    engine = Engine(model, tok, backend="reference", max_running=args.max_running, name="gemma")
    print(f"Gemma 3 270M, {args.n} questions per cell and seed, seeds {args.seeds}, torch threads {args.threads}")
    print("| task | fillers | prompt tokens | policy | retention | accuracy (per seed) | KV bytes kept / full |")
    print("|---|---:|---:|---|---:|---|---|")
    memo = PrefillMemo(model)
    engine.model = memo
    for task in args.tasks:
        for fillers in args.fillers:
            sets = {s: TASKS[task](s, args.n, fillers) for s in args.seeds}
            tokens = statistics.mean(len(engine.encode(ex.prompt)) for ex in sets[args.seeds[0]])
            cells = [("none", 1.0)] + [(p, r) for r in args.retentions for p in args.policies]
            t0 = time.perf_counter()
            by_seed = {}
            for s in args.seeds:  # one seed's prompts remembered at a time
                by_seed[s] = [evaluation.task_accuracy(engine, sets[s], policy, alpha) for policy, alpha in cells]
                memo.clear()
            for i, (policy, alpha) in enumerate(cells):
                scores = [by_seed[s][i] for s in args.seeds]
                acc = statistics.mean(x.accuracy for x in scores)
                kept = statistics.mean(x.kept_bytes for x in scores)
                full = statistics.mean(x.full_bytes for x in scores)
                per = ", ".join(f"{x.accuracy:.3f}" for x in scores)
                print(f"| {task} | {fillers} | {tokens:.0f} | {policy} | {alpha:g} | {acc:.3f} ({per}) | "
                      f"{kept / 1e6:.2f} / {full / 1e6:.2f} MB ({kept / max(full, 1):.1%}) |", flush=True)
            print(f"<!-- {task} at {fillers} fillers: {time.perf_counter() - t0:.0f} s -->", flush=True)
    engine.model = model
    if not args.retentions:
        engine.stop()
        return
    longest = TASKS[args.tasks[0]](args.seeds[0], 1, max(args.fillers))[0].prompt
    print("\n| policy | time to first token (s) | decode tokens/s | ratio to full |")
    print("|---|---:|---:|---:|")
    base = None
    for policy, alpha in (("none", 1.0), ("vl_cache", 0.1)):
        pol = CachePolicy(policy, alpha) if policy != "none" else CachePolicy()
        speed(engine, longest, pol, 4)  # warm-up
        ttft, tps = speed(engine, longest, pol)
        base = base or tps
        print(f"| {policy}@{alpha:g} | {ttft:.2f} | {tps:.2f} | x{tps / base:.2f} |", flush=True)
    engine.stop()


if __name__ == "__main__":
    main()
