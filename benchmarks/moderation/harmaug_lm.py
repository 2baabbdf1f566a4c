"""HarmAug with a real generator: students distilled with Gemma-3-270M-written (instruction, response) pairs vs the
template grammar's texts vs no augmentation, on the same held-out rows (the seed set's validation split).

Teacher: a frozen-linear guard fitted on the seed set's train split (as moderation.train_guard does). The three
students come from the real job (services.moderation.jobs.distill.run_distillation on an InMemoryJobContext, same
seed, epochs and student config): "plain" (train rows only, the job's baseline run), "templates" (train + N
template texts), "gemma" (train + N texts from augment.ChatHarmAugGenerator over Gemma 3 270M in this process: the
platform's engine, Gemma's turn format, the affirmative prefix opening the model's reply, few-shot HarmBench
behaviours; a second generation answers each instruction). Labels of every augmented text are the teacher's.

    .venv/bin/python benchmarks/moderation/harmaug_lm.py --cache /tmp/gemma/cache --n-augment 120
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-augment", type=int, default=120)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16, help="instruction prompts generated together")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--cache", default=".praxon/models", help="where the GGUF and its dequantised copy are kept")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--show", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from benchmarks.moderation.bias_cert import engine_generate, load
    from services.common.jobcontext import InMemoryJobContext
    from services.generation import pretrained
    from services.generation.engine import Engine
    from services.common.minilm import get_base_encoder
    from services.moderation.guard import GuardModel, Targets, base_config, fit_frozen_linear
    from services.moderation.jobs.distill import run_distillation
    from services.moderation.jobs.train_guard import example_features
    from services.moderation.schema import load_seed_dataset

    if (why := pretrained.missing()) is not None:
        raise SystemExit(why)
    t0 = time.perf_counter()
    rows = load_seed_dataset()
    train = [r for r in rows if r.split == "train"]
    enc = get_base_encoder()
    teacher = GuardModel("frozen_linear", fit_frozen_linear(example_features(None, train), Targets.from_examples(train),
                                                            1e-3), base_config("frozen_linear", enc, 1e-3), enc)
    tensors, config = teacher.to_registry()
    print(f"teacher fitted on {len(train)} rows in {time.perf_counter() - t0:.0f} s", flush=True)

    t = time.perf_counter()
    model, tok = load(args.cache)
    engine = Engine(model, tok, backend="reference", max_running=args.batch, name="gemma")
    engine_fn = engine_generate(engine, args.max_new_tokens, 1.0, 50, ("<end_of_turn>", "<start_of_turn>user", "\n\n"))
    calls: list[tuple[str, str]] = []

    def gen_fn(prompts, seeds):
        outs = engine_fn(prompts, seeds)
        calls.extend(zip(prompts, outs, strict=True))
        return outs
    print(f"Gemma loaded in {time.perf_counter() - t:.0f} s", flush=True)

    def run(name: str, generate=None, **params) -> tuple[dict, float]:
        ctx = InMemoryJobContext(params={}, kind="moderation.distill")
        tid = ctx.register_model("guard", tensors, kind="guard/frozen_linear", config=config).model_version_id
        ctx.params.update(teacher_model_version_id=tid, n_augment=args.n_augment, epochs=args.epochs, seed=args.seed,
                          augment_seed=args.seed, **params)
        t = time.perf_counter()
        out = run_distillation(ctx, generate=generate)
        print(f"{name}: {json.dumps({k: round(v, 4) for k, v in out['metrics'].items()})}", flush=True)
        return out["metrics"], time.perf_counter() - t

    m_lm, s_lm = run("gemma", generate=gen_fn, generator_name="gemma-3-270m", generator_version=1,
                     generator_model_version_id="00000000-0000-0000-0000-000000000270", generator_format="gemma",
                     generator_batch=args.batch, generator_max_new_tokens=args.max_new_tokens, generator_top_k=50)
    instr = [o for p, o in calls if p.endswith('I have an idea for a prompt: "')]
    print(f"Gemma calls: {len(instr)} instruction prompts, {len(calls) - len(instr)} responses; samples:")
    for _p, o in calls[:args.show]:
        print(f"    {o[:120]!r}")
    m_tpl, s_tpl = run("templates", train_plain=False)
    engine.stop()
    print(f"\nteacher = frozen-linear guard on the seed train split; held-out = the seed validation split; "
          f"{args.n_augment} augmented texts; {args.epochs} epochs; seed {args.seed}")
    print("| student | augmented texts | teacher unsafe share of them | F1 (unsafe) | AUPRC | vs plain AUPRC | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print(f"| plain (no augmentation) | - | - | {m_lm.get('plain_val_unsafe_f1', float('nan')):.3f} | "
          f"{m_lm.get('plain_val_unsafe_auprc', float('nan')):.3f} | 1.00 | - |")
    for name, m, s in (("templates", m_tpl, s_tpl), ("gemma (HarmAug, LM)", m_lm, s_lm)):
        print(f"| {name} | {int(m['n_augment'])} | {m['augment_teacher_unsafe_fraction']:.2f} | "
              f"{m['student_val_unsafe_f1']:.3f} | {m['student_val_unsafe_auprc']:.3f} | "
              f"{m['student_val_unsafe_auprc'] / m_lm['plain_val_unsafe_auprc']:.3f} | {s:.0f} |")
    print(f"| teacher | - | - | {m_lm['teacher_val_unsafe_f1']:.3f} | {m_lm['teacher_val_unsafe_auprc']:.3f} | - | - |")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
