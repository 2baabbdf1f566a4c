"""kvpress (NVIDIA's KV-cache compression library) as the outside reference for gemma_retrieval.py: the same Gemma 3
270M weights, the same passkey / multi-key questions (services/generation/corpus.py, loaded by file path: it needs
only the standard library), the same token ids (BOS first, no other special token, as Engine.encode), greedy
decoding of 7 tokens and the same answer check (the continuation, stripped, starts with the answer).

It runs in kvpress's own virtual environment, never in praxon's (kvpress 0.5.5 pins transformers < 5.3; praxon has
5.24), and imports nothing else of praxon's:

    python3.11 -m venv /tmp/kvpress-env
    /tmp/kvpress-env/bin/pip install torch==2.13.0 kvpress==0.5.5     # brings transformers 5.2.0
    nice -n 19 /tmp/kvpress-env/bin/python benchmarks/generation/kvpress_reference.py --tasks passkey --seeds 0 \
        --n 40 --fillers 40 --retentions 0.1 0.25 0.5 --presses snapkv streaming_llm tova \
        --model /tmp/gemma/cache/gemma-3-270m-hf

--model is praxon's dequantised Gemma directory (pretrained.hf_directory writes it with transformers 5.24);
transformers 5.2.0 reads it as it is (same config keys: layer_types, rope_parameters), so no conversion is needed.

How a question is answered, and how that differs from kvpress's own pipeline (KVPressTextGenerationPipeline):
- The whole prompt is prefilled under the press (`with press(model)`), as praxon compresses the whole prompt. The
  pipeline instead compresses a "context" and then feeds a separate, uncompressed "question"; praxon's prompts end in
  the question, so splitting them would give kvpress tokens praxon's policies do not get. The pipeline would also
  wrap the prompt in Gemma's chat template (this is the base model; praxon sends the raw prompt).
- The first answer token comes from that prefill's logits. kvpress compresses a layer's cache in a hook after the
  layer's attention has run on the full keys, so those logits are the full cache's, as in praxon's engine. The other
  6 tokens are decoded greedily through the compressed cache (the pipeline's generate_answer loop: explicit
  position ids continuing after the prompt), without stopping at EOS (praxon's ignore_eos=True).
- The cache is DynamicCache(config=...), so Gemma's 15 sliding-window layers hold their last 511 tokens, as in
  praxon. The pipeline's default DynamicCache() gives every layer a full-length cache, and after compression the
  sliding-window mask (which assumes cache slot i is position i) would hide every kept token from those layers.
  A sliding layer still sizes its decode mask for a full window (512 columns) after kvpress shrank it; every column
  of that mask is visible (all within the window), so sliced_mask_sdpa cuts it to the keys held (transformers 5.2's
  SDPA path does not; its eager path does the same slice). Without it decoding after compression fails.
- kvpress's hooks compress every attention layer of Gemma3ForCausalLM (it skips the sliding layers only for
  Gemma3ForConditionalGeneration), each layer to int(held * (1 - compression_ratio)) tokens: a sliding layer keeps
  that fraction of its 511-token window, a global layer of the whole prompt. compression_ratio = 1 - retention, so
  retention is, as in praxon, the fraction of the cache the full cache would hold. SnapKV and TOVA protect their
  observation window / last token inside that budget, as praxon's vl_cache and h2o protect their 8 recent tokens.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.metadata
import importlib.util
import logging
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging as hf_logging

import kvpress

CORPUS = Path(__file__).resolve().parents[2] / "services" / "generation" / "corpus.py"
PRESSES = {"snapkv": kvpress.SnapKVPress, "streaming_llm": kvpress.StreamingLLMPress, "tova": kvpress.TOVAPress,
           "knorm": kvpress.KnormPress, "expected_attention": kvpress.ExpectedAttentionPress}


def sliced_mask_sdpa(sdpa):
    """SDPA with the attention mask cut to the keys held (see the module docstring)."""

    def attention(module, query, key, value, attention_mask, *args, **kwargs):
        if attention_mask is not None and attention_mask.shape[-1] > key.shape[-2]:
            attention_mask = attention_mask[..., : key.shape[-2]]
        return sdpa(module, query, key, value, attention_mask, *args, **kwargs)

    return attention


def load_corpus():
    """praxon's question builders, without importing the services package (which needs praxon's venv)."""
    spec = importlib.util.spec_from_file_location("praxon_corpus", CORPUS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def encode(tokenizer, text: str) -> list[int]:
    """Engine.encode: no special tokens, then BOS first (Gemma is trained with it)."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if ids[:1] != [tokenizer.bos_token_id]:
        ids.insert(0, tokenizer.bos_token_id)
    return ids


def cache_bytes(cache: DynamicCache) -> int:
    return sum(layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
               for layer in cache.layers)


@torch.no_grad()
def prefill(model, ids: list[int]):
    """The full-cache prefill of one prompt: (last logits, cache, each attention layer's forward-hook arguments).
    Every cell of the table prefills the same prompt the same way: a press only rewrites a layer's cache after that
    layer's attention has run, and no layer reads another's cache, so the forward pass (and so what each press's hook
    is given) does not depend on the press. Running it once per prompt and handing the recorded arguments to each
    press's own forward_hook (compress) gives what `with press(model): model(...)` gives (--check compares them)."""
    cache = DynamicCache(config=model.config)
    calls = []
    hooks = [layer.self_attn.register_forward_hook(lambda *call: calls.append(call), with_kwargs=True)
             for layer in model.model.layers]
    try:
        logits = model(input_ids=torch.tensor([ids]), past_key_values=cache, logits_to_keep=1).logits[0, -1]
    finally:
        for hook in hooks:
            hook.remove()
    return logits, cache, calls


@torch.no_grad()
def compressed(model, recorded, press) -> tuple[torch.Tensor, DynamicCache]:
    """(first-token logits, the cache after the press) from a recorded prefill; press None = the full cache."""
    logits, full_cache, calls = recorded
    cache = copy.deepcopy(full_cache)
    if press is not None:
        press.post_init_from_model(model)  # what press(model) does before registering its hooks
        for module, args, kwargs, output in calls:
            press.forward_hook(module, args, {**kwargs, "past_key_values": cache}, output)
    return logits, cache


@torch.no_grad()
def compressed_by_forward(model, ids: list[int], press) -> tuple[torch.Tensor, DynamicCache]:
    """The same through kvpress's context manager and a forward pass of its own (for --check)."""
    cache = DynamicCache(config=model.config)
    with press(model) if press is not None else contextlib.nullcontext():
        logits = model(input_ids=torch.tensor([ids]), past_key_values=cache, logits_to_keep=1).logits[0, -1]
    return logits, cache


@torch.no_grad()
def decode(model, tokenizer, logits: torch.Tensor, cache: DynamicCache, position: int, new_tokens: int
           ) -> tuple[str, int]:
    """(the greedy continuation's text, KV bytes held at the end): kvpress's generate_answer loop, with explicit
    position ids continuing after the prompt, without stopping at EOS."""
    generated = [logits.argmax()]
    for _ in range(new_tokens - 1):
        out = model(input_ids=generated[-1].view(1, 1), past_key_values=cache,
                    position_ids=torch.tensor([[position]]))
        generated.append(out.logits[0, -1].argmax())
        position += 1
    return tokenizer.decode(torch.stack(generated), skip_special_tokens=True), cache_bytes(cache)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="/tmp/gemma/cache/gemma-3-270m-hf")
    ap.add_argument("--tasks", nargs="+", default=["passkey"], choices=["passkey", "multikey"])
    ap.add_argument("--fillers", type=int, default=40)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--retentions", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    ap.add_argument("--presses", nargs="+", default=["snapkv", "streaming_llm", "tova"], choices=list(PRESSES))
    ap.add_argument("--new-tokens", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check", type=int, default=2, help="questions (of the first seed) on which every cell is "
                    "also run through `with press(model)` and a forward pass of its own, and must answer the same")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    logging.getLogger("kvpress.presses.base_press").setLevel(logging.ERROR)  # "Gemma3ForCausalLM not tested"
    ALL_ATTENTION_FUNCTIONS["sdpa"] = sliced_mask_sdpa(ALL_ATTENTION_FUNCTIONS["sdpa"])
    corpus = load_corpus()
    builders = {"passkey": corpus.haystack_passkeys, "multikey": corpus.haystack_codes}
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    for layer in model.model.layers:  # what press(model) does to each layer besides registering its hook
        layer.self_attn.rotary_emb = model.model.rotary_emb
    print(f"kvpress {importlib.metadata.version('kvpress')}, transformers {transformers.__version__}, torch "
          f"{torch.__version__}, attention {model.config._attn_implementation}, {args.n} questions per cell and "
          f"seed, seeds {args.seeds}, {args.fillers} filler lines, torch threads {args.threads}", flush=True)
    cells = [("none", 1.0)] + [(p, r) for r in args.retentions for p in args.presses]
    presses = [None if name == "none" else PRESSES[name](compression_ratio=1 - r) for name, r in cells]
    for task in args.tasks:
        t0 = time.perf_counter()
        hits = {(c, s): 0 for c in range(len(cells)) for s in args.seeds}
        kept: dict[int, list[int]] = {c: [] for c in range(len(cells))}
        tokens = []
        for s in args.seeds:
            for q, example in enumerate(builders[task](s, args.n, args.fillers)):
                ids = encode(tokenizer, example.prompt)
                tokens.append(len(ids))
                recorded = prefill(model, ids)
                for c, press in enumerate(presses):
                    text, held = decode(model, tokenizer, *compressed(model, recorded, press), len(ids),
                                        args.new_tokens)
                    if s == args.seeds[0] and q < args.check:
                        again = decode(model, tokenizer, *compressed_by_forward(model, ids, press), len(ids),
                                       args.new_tokens)
                        if again != (text, held):
                            raise SystemExit(f"--check: {cells[c]} question {q}: {again} != {(text, held)}")
                    hits[c, s] += text.strip().startswith(example.answer)
                    kept[c].append(held)
        wall = time.perf_counter() - t0
        print(f"\n{task}: {statistics.mean(tokens):.0f} prompt tokens, {wall:.0f} s; the first {args.check} "
              "questions answered the same through press(model)\n")
        print("| task | prompt tokens | press | retention | accuracy (per seed) | KV bytes kept / full |")
        print("|---|---:|---|---:|---|---|")
        full = statistics.mean(kept[0])
        for c, (name, retention) in enumerate(cells):
            accuracies = [hits[c, s] / args.n for s in args.seeds]
            per = ", ".join(f"{a:.3f}" for a in accuracies)
            mean_kept = statistics.mean(kept[c])
            print(f"| {task} | {statistics.mean(tokens):.0f} | {name} | {retention:g} | "
                  f"{statistics.mean(accuracies):.3f} ({per}) | {mean_kept / 1e6:.2f} / {full / 1e6:.2f} MB "
                  f"({mean_kept / full:.1%}) |", flush=True)


if __name__ == "__main__":
    main()
