"""FLAT vs gradient ascent vs NPO on fictitious authors (TOFU's protocol at small scale), Gemma 3 270M with LoRA.

1. Fine-tune the base model on the QA of the first `--authors` fictitious authors (services/unlearning/authors.py;
   LoRA merged into the weights): the "full" model, one for every fraction and seed. Fine-tune it again without the
   forget authors of the largest fraction: the "retain" model, the reference of forget quality for every fraction
   (the forget sets are nested: the last ceil(fraction * authors) authors). A simplification of TOFU, which trains
   one retain model per fraction: the reference truth ratios of a forgotten author come from a model that never saw
   it either way; ours also never saw the other authors of the largest forget set (one fine-tune less: 13-15 min of
   wall time on the 2 shared cores). `--retain-per-fraction` trains TOFU's one per fraction instead.
2. Forget the last ceil(fraction * authors) authors from the full model with each method (same LoRA settings,
   epochs, learning rate, batch): FLAT (Total-Variation and KL), gradient ascent, NPO (OpenUnlearning: beta 0.1,
   retain weight 1 on that fraction's retained authors, reference = the full model).
3. Evaluate every model (services/unlearning/llm_eval.py): forget quality (KS p-value of forget truth ratios against
   the retain model), forget-answer probability, template ("I don't know") probability, model utility (harmonic mean
   of probability / truth ratio / ROUGE-L recall on retained authors and world facts), MIA AUC (forget records vs
   authors never trained on). Utility is measured on questions of the authors retained at every fraction, so it
   compares across fractions.
Unlearning seeds vary the data order, template draws and LoRA initialisation; the fine-tuned models are shared.
The loop runs seed by seed (every fraction and method of a seed before the next seed), and rows are appended to
--jsonl as they finish: a run stopped between seeds keeps whole seeds; `--table JSONL` prints the table of a file.

    nohup nice .venv/bin/python benchmarks/unlearning/flat.py --save-dir /tmp/flat_models > /tmp/flat_bench.log 2>&1 &
    .venv/bin/python benchmarks/unlearning/flat.py --table /tmp/flat_bench.jsonl
    .venv/bin/python benchmarks/unlearning/flat.py --tiny      # a random tiny Llama on the same tokenizer: smoke
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from services.unlearning import authors as A
from services.unlearning import flat as F
from services.unlearning import llm_eval as E

METHODS = {"flat_tv": ("flat", "total_variation"), "flat_kl": ("flat", "kl"), "grad_ascent": ("gradient_ascent", ""),
           "npo": ("npo", "")}


def load_model(args):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.model:
        path = Path(args.model)
    else:
        from services.generation.pretrained import hf_directory

        path = hf_directory(args.cache)
    tok = AutoTokenizer.from_pretrained(path)
    if args.tiny:
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                          eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id)
        return LlamaForCausalLM(cfg).eval(), tok, "tiny-random-llama"
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), tok, path.name


def qa(recs):
    return [F.QA(r["question"], r["answer"], r["id"]) for r in recs]


def finetune(model, tok, recs, args, seed=0, tag=""):
    """The fine-tuned model; with --save-dir it is saved there (tag) and reused by a later run with the same
    settings (the fine-tunes are most of the wall time)."""
    saved = Path(args.save_dir) / f"{tag}-a{args.authors}-e{args.ft_epochs}-lr{args.ft_lr:g}" if args.save_dir else None
    if saved is not None and (saved / "config.json").exists():
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32).eval(), [{"loss": float("nan")}]
    cfg = F.TrainConfig(method="finetune", adaptation="lora", lr=args.ft_lr, epochs=args.ft_epochs,
                        batch_size=args.ft_batch, lora_dropout=0.0, seed=seed)
    tr = F.Trainer(copy.deepcopy(model), tok, qa(recs), cfg)
    logs = tr.run()
    out = tr.final_model()
    if saved is not None:
        out.save_pretrained(saved)
    return out, logs


def evaluate(model, tok, sets, args):
    t = time.perf_counter()
    ev = E.evaluate(model, tok, forget=sets["forget"], retain=sets["retain_eval"], world=sets["world"],
                    holdout=sets["holdout"], rouge=not args.no_rouge)
    ev["template_probability"] = E.template_probability(model, tok, sets["forget"], F.TEMPLATE_ANSWERS[:4])
    ev["eval_s"] = time.perf_counter() - t
    return ev


def row(name, seed, ev, ref_ratios, seconds, extra=None):
    fq = E.forget_quality(ev["forget_truth_ratios"], ref_ratios)
    out = {"model": name, "seed": seed, "forget_quality": fq["forget_quality"], "ks": fq["ks_statistic"],
           "forget_prob": ev["forget_probability"], "template_prob": ev["template_probability"],
           "forget_truth_ratio": ev["forget_truth_ratio"], "model_utility": ev["model_utility"],
           "retain": ev["retain"], "world_facts": ev["world_facts"], "mia_auc": ev["mia_auc"],
           "train_s": seconds, "eval_s": ev["eval_s"]}
    out.update(extra or {})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default="/tmp/gemma/cache")
    ap.add_argument("--model", default="", help="a Hugging Face directory instead of Gemma 3 270M")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--authors", type=int, default=20, help="20: forget 5%% = 1 author, 10%% = 2")
    ap.add_argument("--holdout", type=int, default=2, help="authors never trained on (MIA non-members)")
    ap.add_argument("--fractions", default="0.05,0.1")
    ap.add_argument("--retain-per-fraction", action="store_true",
                    help="a retain model per fraction (TOFU) instead of one without the largest forget set")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--methods", default="flat_tv,flat_kl,grad_ascent,npo")
    ap.add_argument("--ft-epochs", type=int, default=5)
    ap.add_argument("--ft-lr", type=float, default=1e-3)
    ap.add_argument("--ft-batch", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=10, help="unlearning epochs (forget_lora.yaml: 10)")
    ap.add_argument("--lr", type=float, default=1e-4, help="unlearning lr (forget_lora.yaml: 1e-4)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--retain-eval", type=int, default=12, help="retained-author questions evaluated")
    ap.add_argument("--no-rouge", action="store_true")
    ap.add_argument("--jsonl", default="/tmp/flat_bench.jsonl")
    ap.add_argument("--save-dir", default="", help="keep the fine-tuned models here and reuse them")
    ap.add_argument("--table", default="", help="only print the table of this JSONL file")
    args = ap.parse_args(argv)
    if args.table:
        print_table([json.loads(line) for line in open(args.table) if line.strip()])
        return
    torch.set_num_threads(1)
    t_all = time.perf_counter()
    model, tok, model_name = load_model(args)
    data = A.load()
    groups = A.by_author(data["qa"])
    names = list(groups)
    train_authors, holdout_authors = names[:args.authors], names[args.authors:args.authors + args.holdout]
    out = open(args.jsonl, "a")
    rows = []

    def emit(r):
        rows.append(r)
        out.write(json.dumps(r, default=float) + "\n")
        out.flush()
        print(json.dumps({k: v for k, v in r.items() if not isinstance(v, dict)}, default=float), flush=True)

    train = [r for a in train_authors for r in groups[a]]
    t = time.perf_counter()
    full, logs = finetune(model, tok, train, args, tag="full")
    ft_s = time.perf_counter() - t
    print(f"fine-tuned on {len(train)} QA of {len(train_authors)} authors in {ft_s:.0f}s, last loss "
          f"{logs[-1]['loss']:.3f}", flush=True)
    fractions = [float(x) for x in args.fractions.split(",")]
    n_forgets = {frac: max(1, math.ceil(frac * len(train_authors))) for frac in fractions}
    if max(n_forgets.values()) >= len(train_authors):
        raise SystemExit("a forget fraction leaves no retained author")
    n_max = max(n_forgets.values())
    # utility questions from the authors retained at every fraction
    always_retained = [r for a in train_authors[:-n_max] for r in groups[a]]
    g = torch.Generator().manual_seed(0)
    retain_eval = [always_retained[i] for i in torch.randperm(len(always_retained), generator=g)[:args.retain_eval]]
    retain_models = {}  # number of authors left out -> (model, seconds), while the references are evaluated
    setups = {}
    for frac in fractions:
        n_forget = n_forgets[frac]
        forget = [r for a in train_authors[-n_forget:] for r in groups[a]]
        retain = [r for a in train_authors[:-n_forget] for r in groups[a]]
        sets = {"forget": forget, "retain_eval": retain_eval, "world": data["world_facts"],
                "holdout": [r for a in holdout_authors for r in groups[a]]}
        n_ref = n_forget if args.retain_per_fraction else n_max
        if n_ref not in retain_models:
            t = time.perf_counter()
            ret_model, _ = finetune(model, tok, [r for a in train_authors[:-n_ref] for r in groups[a]], args,
                                    tag=f"retain{n_ref}")
            retain_models[n_ref] = (ret_model, time.perf_counter() - t)
        ret_model, ret_s = retain_models[n_ref]
        ref = evaluate(ret_model, tok, sets, args)
        base = {"fraction": frac, "forget_authors": n_forget, "forget_qa": len(forget), "retain_model_authors":
                len(train_authors) - n_ref}
        emit(row("retain_model", -1, ref, ref["forget_truth_ratios"], ret_s, base))
        ev_full = evaluate(full, tok, sets, args)
        emit(row("finetuned", -1, ev_full, ref["forget_truth_ratios"], ft_s, base))
        setups[frac] = (forget, retain, sets, ref["forget_truth_ratios"], base)
    del ret_model
    retain_models.clear()
    for seed in [int(s) for s in args.seeds.split(",")]:
        for frac in fractions:
            forget, retain, sets, ref_ratios, base = setups[frac]
            for m in args.methods.split(","):
                method, div = METHODS[m]
                cfg = F.TrainConfig(method=method, divergence=div or "total_variation", adaptation="lora",
                                    lr=args.lr, epochs=args.epochs, batch_size=args.batch, seed=seed)
                t = time.perf_counter()
                tr = F.Trainer(copy.deepcopy(full), tok, qa(forget), cfg, retain=qa(retain))
                tr.run()
                um = tr.final_model()
                secs = time.perf_counter() - t
                ev = evaluate(um, tok, sets, args)
                emit(row(m, seed, ev, ref_ratios, secs, dict(base, steps=tr.total)))
                del um, tr
        print(f"seed {seed} done at {time.perf_counter() - t_all:.0f}s", flush=True)
    wall = time.perf_counter() - t_all
    print(f"\n{model_name}: {len(train_authors)} authors x 6 QA, LoRA r8; unlearning {args.epochs} epochs lr "
          f"{args.lr:g} batch {args.batch}; fine-tune {args.ft_epochs} epochs lr {args.ft_lr:g}; wall {wall:.0f}s")
    print_table(rows)


def print_table(rows):
    hdr = ("frac", "model", "seeds", "forget_q", "truth_ratio", "forget_p", "tmpl_p", "utility", "retain_p",
           "world_p", "mia_auc")
    print(" | ".join(f"{h:>12}" for h in hdr))
    keys = []
    for r in rows:
        k = (r["fraction"], r["model"])
        if k not in keys:
            keys.append(k)
    for frac, m in keys:
        rs = [r for r in rows if r["fraction"] == frac and r["model"] == m]

        def mean(f, rs=rs):
            vals = [f(r) for r in rs if f(r) is not None]
            return sum(vals) / len(vals) if vals else float("nan")
        cells = (f"{frac:g}", m, str(len(rs)), f"{mean(lambda r: r['forget_quality']):.3g}",
                 f"{mean(lambda r: r['forget_truth_ratio']):.3f}",
                 f"{mean(lambda r: r['forget_prob']):.3f}", f"{mean(lambda r: r['template_prob']):.3f}",
                 f"{mean(lambda r: r['model_utility']):.3f}", f"{mean(lambda r: r['retain']['probability']):.3f}",
                 f"{mean(lambda r: r['world_facts']['probability']):.3f}", f"{mean(lambda r: r['mia_auc']):.3f}")
        print(" | ".join(f"{c:>12}" for c in cells))


if __name__ == "__main__":
    main()
