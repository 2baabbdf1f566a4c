"""Guard and policy-scorer quality on the held-out (validation) split of the packaged seed set.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/moderation/quality.py [--finetune] [--threads N]

Guard rows: unsafe F1 and AUPRC, topic macro-F1, severity exact / within-one accuracy, for frozen_linear at a few L2
strengths (and finetune with --finetune), overall and per role. Policy rows: the learned rule scorer against the
raw cosine(sentence, rule) baseline (average precision over validation rows x rubric rules, and chunk-verdict
macro-F1 with the cosine threshold tuned on the train split), on all topics and zero-shot on topics S9-S11 whose
rules the scorer never saw. The seed split holds out whole scenarios, but shares templates with training: this is
an in-distribution sanity check, not a public benchmark (import BingoGuardTest / WildGuardTest for that)."""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from services.moderation.encoder import get_base_encoder
from services.moderation.guard import (
    FinetuneTrainer,
    GuardModel,
    Targets,
    base_config,
    fit_frozen_linear,
    role_features,
)
from services.moderation.metrics import average_precision, f1_score, guard_metrics
from services.moderation.policies import (
    pair_features,
    rubric_rules,
    rule_label,
    train_policy_scorer,
)
from services.moderation.schema import load_seed_dataset
from services.moderation.taxonomy import TOPICS

COLS = ("unsafe_f1", "unsafe_auprc", "topic_macro_f1", "severity_exact", "severity_within_one")


def row(name: str, m: dict[str, float]) -> str:
    return f"{name:<34}" + "".join(f"{m.get(c, float('nan')):>21.3f}" for c in COLS) + f"{int(m['n']):>6}"


def chunk_f1(scores: np.ndarray, rules, val, thr: float, topics) -> float:
    f1s = []
    for tp in topics:
        b = [j for j, (t, k, _) in enumerate(rules) if t == tp and k == "blocked"]
        a = [j for j, (t, k, _) in enumerate(rules) if t == tp and k == "allowed"]
        best_b, best_a = scores[:, b].max(1), scores[:, a].max(1) if a else np.full(len(val), -np.inf)
        verdict = (best_b >= thr) & (best_b > best_a)
        f1s.append(f1_score(verdict, np.array([rule_label(e, tp, "blocked") for e in val])))
    return float(np.mean(f1s))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--finetune", action="store_true", help="also train kind=finetune (slow on CPU)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rows = load_seed_dataset()
    train, val = [r for r in rows if r.split == "train"], [r for r in rows if r.split == "validation"]
    enc = get_base_encoder()
    t0 = time.perf_counter()
    phi_tr = role_features(enc.embed([r.text for r in train]), [r.role for r in train])
    phi_va = role_features(enc.embed([r.text for r in val]), [r.role for r in val])
    t_feat = time.perf_counter() - t0
    y_tr, y_va = Targets.from_examples(train), Targets.from_examples(val)
    roles = np.array([r.role for r in val])

    print(f"seed set: {len(train)} train / {len(val)} validation rows; features {t_feat:.1f}s "
          f"({1000 * t_feat / len(rows):.1f} ms/text, canonical batch-1, {args.threads} thread(s))\n")
    print(f"{'guard (validation split)':<34}" + "".join(f"{c:>21}" for c in COLS) + f"{'n':>6}")
    models = []
    for l2 in (1e-4, 1e-3, 1e-2):
        t0 = time.perf_counter()
        heads = fit_frozen_linear(phi_tr, y_tr, l2)
        fit_s = time.perf_counter() - t0
        m = GuardModel("frozen_linear", heads, base_config("frozen_linear", enc, l2), enc)
        models.append((f"frozen_linear l2={l2:g} ({fit_s:.1f}s)", m, phi_va))
    if args.finetune:
        t0 = time.perf_counter()
        warm = fit_frozen_linear(phi_tr, y_tr, 1e-3)
        tr = FinetuneTrainer(enc, warm, trainable_layers=2, l2=1e-3, lr=3e-5, head_lr=1e-3, batch_size=16, seed=0)
        for e in range(args.epochs):
            tr.train_epoch([r.text for r in train], [r.role for r in train], y_tr, e)
        ft = tr.to_model(base_config("finetune", enc, 1e-3))
        models.append((f"finetune top2 {args.epochs}ep ({time.perf_counter() - t0:.0f}s)", ft,
                       ft.features([r.text for r in val], [r.role for r in val])))
    for name, m, phi in models:
        pred = m.predict_from_features(phi)
        print(row(name, guard_metrics(pred, y_va)))
        for role in ("prompt", "response"):
            sel = roles == role
            print(row(f"  {role}", guard_metrics({k: v[sel] for k, v in pred.items()}, y_va.subset(sel))))

    print(f"\n{'policy scorer (validation split)':<55}{'pair AP':>10}{'chunk macro-F1':>16}")
    s_tr, s_va = enc.embed([r.text for r in train]), enc.embed([r.text for r in val])
    for label, fit_topics, test_topics in (("all topics", TOPICS, TOPICS),
                                           ("zero-shot S9-S11 (trained on S1-S8)", TOPICS[:8], TOPICS[8:])):
        scorer = train_policy_scorer(enc, train, topics=fit_topics)
        rules = rubric_rules(test_topics)
        r_emb = enc.embed([t for _, _, t in rules])
        y = np.array([[rule_label(e, t, k) for t, k, _ in rules] for e in val])
        learned = scorer.score(s_va, r_emb)
        cos_va = pair_features(s_va, r_emb)[..., -1]
        # cosine threshold: the best chunk-F1 threshold on the train split (a fair, tuned baseline)
        fit_rules = rubric_rules(fit_topics)
        cos_tr = pair_features(s_tr, enc.embed([t for _, _, t in fit_rules]))[..., -1]
        thr = max(np.quantile(cos_tr, np.linspace(0.5, 0.995, 60)),
                  key=lambda q: chunk_f1(cos_tr, fit_rules, train, q, fit_topics))
        print(f"  learned scorer,  {label:<36}{average_precision(learned.ravel(), y.ravel()):>10.3f}"
              f"{chunk_f1(learned, rules, val, 0.5, test_topics):>16.3f}")
        print(f"  cosine baseline, {label:<36}{average_precision(cos_va.ravel(), y.ravel()):>10.3f}"
              f"{chunk_f1(cos_va, rules, val, thr, test_topics):>16.3f}")


if __name__ == "__main__":
    main()
