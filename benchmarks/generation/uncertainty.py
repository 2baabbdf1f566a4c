"""Semantic uncertainty on Gemma 3 270M (base model, few-shot prompt): SDLG vs multinomial-sampling semantic entropy
vs predictive entropy vs lexical similarity on the closed-book QA set (services/generation/data/qa_closed_book.jsonl).

Per question: the initial answer by beam search (5 beams, the same for every method), judged right or wrong
(data/make_qa.is_correct); N generations besides it by SDLG (deterministic: beam search throughout) and by
multinomial sampling at temperature 1 (one run per seed); predictive entropy and lexical similarity are computed on
the multinomial samples. Metric: AUROC of each score for predicting a wrong initial answer; also the number of
semantic clusters and the generation cost (LM seconds, LM generate calls) per question. Questions: a seeded random
subset of --n (a stratified shuffle of the whole set), the same for every method.

The NLI model is the MiniLM NLI head trained by services.generation.nli (a stand-in for DeBERTa-MNLI, the paper's
model), loaded from --nli (a file written by this script's --train-nli-steps run, or by an earlier one).
lm-polygraph is not installed here: no cross-check with its semantic entropy.

  .venv/bin/python benchmarks/generation/uncertainty.py --n 60 --gens 5 --seeds 0 1 2"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "services" / "generation" / "data"))

FEW_SHOT = ("Answer each question with a short answer.\n"
            "Q: What is the capital of Italy?\nA: Rome\n"
            "Q: Who wrote Ulysses?\nA: James Joyce\n"
            "Q: In what year did the Second Boer War begin?\nA: 1899\n"
            "Q: What is the capital of Freedonistan?\nA: Unknown, there is no such place.\n"
            "Q: What is the chemical symbol of nitrogen?\nA: N\n"
            "Q: {q}\nA:")


def gemma(cache: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from services.generation import pretrained

    path = pretrained.hf_directory(cache)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


def trained_nli(path: Path, steps: int):
    """The MiniLM NLI head: loaded from `path`, or trained here (the job's own Steps class) and saved there."""
    from services.generation import nli as nli_mod

    if not path.exists():
        from services.common.jobcontext import InMemoryJobContext, run_steps
        from services.generation.params import NLITrainParams

        ctx = InMemoryJobContext(params={}, kind="generation.nli_train")
        t = time.perf_counter()
        res = run_steps(ctx, nli_mod.NLITraining(NLITrainParams(steps=steps)), checkpoint_every=10 ** 6)
        _, tensors, config, _ = next(iter(ctx.models.values()))
        torch.save({"tensors": tensors, "config": config, "metrics": res["metrics"],
                    "seconds": time.perf_counter() - t}, path)
    saved = torch.load(path, weights_only=False)
    return nli_mod.load(saved["tensors"], saved["config"], name=nli_mod.STAND_IN), saved["metrics"]


def auroc(wrong: list[int], score: list[float]) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(wrong, score)) if 0 < sum(wrong) < len(wrong) else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=60, help="questions")
    ap.add_argument("--gens", type=int, default=5, help="generations besides the initial answer (N)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="multinomial sampling seeds")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--cache", default="/tmp/gemma/cache")
    ap.add_argument("--nli", default="/tmp/sdlg/nli400.pt")
    ap.add_argument("--train-nli-steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write the per-question records here (after every question)")
    ap.add_argument("--report", help="only print the table of a --json file (e.g. of a run cut short)")
    args = ap.parse_args()
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        a = saved["args"]
        report(saved["rows"], a["seeds"], a["gens"], "MiniLM NLI head (stand-in for DeBERTa-MNLI)", float("nan"))
        return
    torch.set_num_threads(args.threads)
    seeds, gens = args.seeds, args.gens

    import make_qa

    from services.generation.uncertainty import LM, Options, estimate, initial_answer

    nli, nli_metrics = trained_nli(Path(args.nli), args.train_nli_steps)
    model, tok = gemma(Path(args.cache))
    items = make_qa.load()
    rng = random.Random(1234)
    rng.shuffle(items)
    items = items[:args.n]
    print(f"NLI: {nli.name}, held-out accuracy {nli_metrics['heldout_accuracy']:.3f} "
          f"({int(nli_metrics['heldout_pairs'])} generated pairs)", flush=True)
    rows = []
    t_all = time.perf_counter()
    for k, it in enumerate(items):
        prompt = FEW_SHOT.format(q=it["question"])
        base = dict(n=gens, max_new_tokens=args.max_new_tokens)
        t0 = time.perf_counter()
        lm = LM(model, tok, Options(**base), tok(prompt)["input_ids"])   # the prompt prefilled once
        initial = initial_answer(lm)                                      # the same initial answer for all
        shared = time.perf_counter() - t0
        s = estimate(model, tok, nli, prompt, it["question"], Options(method="sdlg", **base), lm=lm, initial=initial)
        row = {"id": it["id"], "difficulty": it["difficulty"], "question": it["question"], "answer": s.answer,
               "wrong": int(not make_qa.is_correct(s.answer, it)),
               "sdlg": {"se": s.semantic_entropy, "clusters": len(s.clusters), "seconds": shared + s.seconds_generate,
                        "calls": s.lm_calls, "texts": [g.text for g in s.generations]},
               "multinomial": {}}
        for seed in seeds:
            m = estimate(model, tok, nli, prompt, it["question"], Options(method="multinomial", seed=seed, **base),
                         lm=lm, initial=initial)
            row["multinomial"][seed] = {"se": m.semantic_entropy, "pe": m.predictive_entropy,
                                        "lex": 1 - m.lexical_similarity, "clusters": len(m.clusters),
                                        "seconds": shared + m.seconds_generate, "calls": m.lm_calls,
                                        "texts": [g.text for g in m.generations]}
        rows.append(row)
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "nli": nli_metrics, "rows": rows}, indent=1))
        print(f"[{k + 1}/{len(items)} {time.perf_counter() - t_all:.0f}s] {it['difficulty']:9s} "
              f"{'WRONG' if row['wrong'] else 'right'} {s.answer!r:.40} sdlg {row['sdlg']['clusters']} clusters "
              f"SE {s.semantic_entropy:.2f}; ms {row['multinomial'][seeds[0]]['clusters']} clusters", flush=True)
    report(rows, seeds, gens, nli.name, time.perf_counter() - t_all)


def report(rows: list[dict], seeds: list[int], gens: int, nli_name: str, wall: float) -> None:
    seeds = [str(s) for s in seeds]
    for r in rows:
        r["multinomial"] = {str(k): v for k, v in r["multinomial"].items()}
    wrong = [r["wrong"] for r in rows]

    def per_seed(key):
        return [auroc(wrong, [r["multinomial"][s][key] for r in rows]) for s in seeds]

    def mean_sd(xs):
        return f"{statistics.mean(xs):.3f} +- {statistics.pstdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"

    ms_clusters = [statistics.mean(r["multinomial"][s]["clusters"] for r in rows) for s in seeds]
    ms_secs = statistics.mean(r["multinomial"][s]["seconds"] for r in rows for s in seeds)
    ms_calls = statistics.mean(r["multinomial"][s]["calls"] for r in rows for s in seeds)
    sd_secs = statistics.mean(r["sdlg"]["seconds"] for r in rows)
    sd_calls = statistics.mean(r["sdlg"]["calls"] for r in rows)
    sd_auc = auroc(wrong, [r["sdlg"]["se"] for r in rows])
    sd_clusters = statistics.mean(r["sdlg"]["clusters"] for r in rows)
    print(f"\n{len(rows)} questions ({sum(wrong)} initial answers wrong), N = {gens} generations besides the "
          f"initial answer, seeds {seeds}; NLI: {nli_name}; wall {wall:.0f} s")
    print("| method | AUROC (wrong answer) | clusters / question | LM seconds / question | LM generate calls |")
    print("|---|---|---|---|---|")
    print(f"| SDLG (semantic entropy, importance weights) | {sd_auc:.3f} (deterministic) | {sd_clusters:.2f} | "
          f"{sd_secs:.2f} ({sd_secs / ms_secs:.2f}x MS) | {sd_calls:.1f} |")
    print(f"| multinomial sampling (semantic entropy) | {mean_sd(per_seed('se'))} | {mean_sd(ms_clusters)} | "
          f"{ms_secs:.2f} | {ms_calls:.1f} |")
    print(f"| predictive entropy (same samples) | {mean_sd(per_seed('pe'))} | - | {ms_secs:.2f} | {ms_calls:.1f} |")
    print(f"| lexical similarity (same samples, 1 - ROUGE-L) | {mean_sd(per_seed('lex'))} | - | {ms_secs:.2f} | "
          f"{ms_calls:.1f} |")
    for d in ("easy", "medium", "hard", "fictional"):
        sel = [r for r in rows if r["difficulty"] == d]
        if sel:
            print(f"  {d}: {len(sel)} questions, {sum(r['wrong'] for r in sel)} wrong")


if __name__ == "__main__":
    main()
