"""HarmAug distillation: teacher guard vs students -- quality on the seed validation split and CPU latency.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/moderation/distill.py [--seeds 3] [--n-augment 1200] [--threads 1]
                                                                       [--epochs 30] [--csv out.csv]

Teacher: the frozen_linear guard (MiniLM-L6 + linear heads) fitted on the seed train split, exactly as the training
job does. Students (services/moderation/distill.py, the same code path as run_distillation): "plain" = HarmAug loss
on the train rows only; "augmented" = train rows + `--n-augment` template texts (augment.py) labelled by the teacher.
Quality: unsafe F1 (P >= 0.5) and AUPRC on the validation split, mean +- std over training seeds.
Latency: milliseconds per text over the validation texts, single process, `--threads` torch threads, median of
`--repeats` passes, no caches: teacher = tokenize + MiniLM forward + pooling + heads (batch 1: each text alone, the
serving path; batch 32: padded batches, embed_batched's path); student = regex tokenizer + vocabulary lookup +
network (batch 1: predict_proba; batch 32: predict_proba_batched). The speed-up is teacher / student in this run.
The seed split holds out whole scenarios but shares templates with training: an in-distribution check, not a
public benchmark (students can beat the teacher here because the templates are lexical).
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from services.moderation.augment import TemplateGenerator
from services.moderation.distill import StudentConfig, TrainConfig, train_student
from services.common.minilm import get_base_encoder
from services.moderation.guard import GuardModel, Targets, base_config, fit_frozen_linear, role_features
from services.moderation.metrics import average_precision, f1_score
from services.moderation.schema import load_seed_dataset


def teacher_forward(teacher: GuardModel, texts: list[str], roles: list[str]) -> np.ndarray:
    enc = teacher.encoder
    with torch.inference_mode():
        e = enc.forward(enc.tokenize(texts, padding=len(texts) > 1)).numpy()
        return teacher.predict_from_features(role_features(e, roles))["unsafe"]


def per_text_ms(fn, texts: list[str], roles: list[str], batch: int, repeats: int) -> float:
    passes = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for k in range(0, len(texts), batch):
            fn(texts[k:k + batch], roles[k:k + batch])
        passes.append((time.perf_counter() - t0) * 1000 / len(texts))
    return statistics.median(passes)


def sd(v: list[float]) -> str:
    return f" +-{np.std(v):.3f}" if len(v) > 1 else "       "


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--n-augment", type=int, default=1200)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--csv", type=str, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    t0 = time.time()
    rows = load_seed_dataset()
    train = [r for r in rows if r.split == "train"]
    val = [r for r in rows if r.split == "validation"]
    enc = get_base_encoder()
    phi = role_features(enc.embed([r.text for r in train]), [r.role for r in train])
    teacher = GuardModel("frozen_linear", fit_frozen_linear(phi, Targets.from_examples(train), 1e-3),
                         base_config("frozen_linear", enc, 1e-3), enc)
    aug = TemplateGenerator().generate(args.n_augment, seed=0, exclude=[r.text for r in rows])
    tr_t, tr_r = [r.text for r in train], [r.role for r in train]
    au_t, au_r = [a.text for a in aug], [a.role for a in aug]
    va_t, va_r = [r.text for r in val], [r.role for r in val]
    y_val = np.array([r.unsafe for r in val])
    au_c = [a.prompt for a in aug]  # augmented pairs are labelled with their prompt as context
    p_tr, p_au, p_va = (teacher.predict_proba(t, r, c) for t, r, c in ((tr_t, tr_r, None), (au_t, au_r, au_c),
                                                                     (va_t, va_r, None)))
    print(f"setup (teacher fit + labels for {len(tr_t)} train, {len(au_t)} augmented, {len(va_t)} validation texts):"
          f" {time.time() - t0:.0f}s; teacher labels {np.mean(p_au['unsafe'] > 0.5):.2f} of the augmented texts "
          "unsafe")

    hard_tr = np.array([int(r.unsafe) for r in train])
    hard_au = (p_au["unsafe"] > 0.5).astype(np.int64)
    cat = {k: np.concatenate([p_tr[k], p_au[k]]) for k in p_tr}
    cfg = StudentConfig()
    quality: dict[str, list[tuple[float, float]]] = {"plain": [], "augmented": []}
    students = {}
    for seed in range(args.seeds):
        tc = TrainConfig(epochs=args.epochs, seed=seed)
        for name, (t, r, h, p) in {"plain": (tr_t, tr_r, hard_tr, p_tr),
                                   "augmented": (tr_t + au_t, tr_r + au_r, np.r_[hard_tr, hard_au], cat)}.items():
            st = train_student(t, r, h, p, cfg, tc, [None] * len(tr_t) + au_c if name == "augmented" else None)
            pv = st.predict_proba(va_t, va_r)["unsafe"]
            quality[name].append((f1_score(pv >= 0.5, y_val), average_precision(pv, y_val)))
            students.setdefault(name, st)
    t_q = (f1_score(p_va["unsafe"] >= 0.5, y_val), average_precision(p_va["unsafe"], y_val))

    lat = {}
    lat["teacher"] = [per_text_ms(lambda t, r: teacher_forward(teacher, t, r), va_t, va_r, b, args.repeats)
                      for b in (1, 32)]
    for name, st in students.items():
        lat[name] = [per_text_ms(st.predict_proba, va_t, va_r, 1, args.repeats),
                     per_text_ms(st.predict_proba_batched, va_t, va_r, 32, args.repeats)]
    n_params = {"teacher": sum(p.numel() for p in enc.model.parameters()) + sum(v.numel() for v in teacher.heads.tensors().values()),
                **{k: sum(p.numel() for p in s.net.parameters()) for k, s in students.items()}}

    print(f"\nseed validation split: {len(val)} texts ({int(y_val.sum())} unsafe); {args.seeds} student seeds; "
          f"torch threads {args.threads}")
    hdr = (f"{'model':<22}{'params':>12}{'F1':>16}{'AUPRC':>16}{'ms/text b=1':>14}{'ms/text b=32':>14}"
           f"{'speed-up b=1':>14}{'speed-up b=32':>15}")
    print(hdr)
    print("-" * len(hdr))
    out_rows = []
    for name in ("teacher", "plain", "augmented"):
        if name == "teacher":
            f1s, aps = [t_q[0]], [t_q[1]]
        else:
            f1s, aps = [q[0] for q in quality[name]], [q[1] for q in quality[name]]
        l1, l32 = lat[name]
        s1, s32 = lat["teacher"][0] / l1, lat["teacher"][1] / l32
        label = {"teacher": "teacher (MiniLM-L6)", "plain": "student, no augment", "augmented": "student + HarmAug"}
        print(f"{label[name]:<22}{n_params[name] / 1e6:>11.2f}M{np.mean(f1s):>9.3f}{sd(f1s)}{np.mean(aps):>9.3f}"
              f"{sd(aps)}{l1:>14.3f}{l32:>14.3f}{s1:>13.1f}x{s32:>14.1f}x")
        out_rows.append({"model": name, "params": n_params[name], "f1_mean": float(np.mean(f1s)),
                         "f1_std": float(np.std(f1s)), "auprc_mean": float(np.mean(aps)),
                         "auprc_std": float(np.std(aps)), "ms_per_text_b1": l1, "ms_per_text_b32": l32,
                         "speedup_b1": s1, "speedup_b32": s32, "threads": args.threads, "device": "cpu"})
    wins_f1 = sum(a[0] > p[0] for a, p in zip(quality["augmented"], quality["plain"], strict=True))
    wins_ap = sum(a[1] > p[1] for a, p in zip(quality["augmented"], quality["plain"], strict=True))
    print(f"\naugmented vs plain over {args.seeds} seeds: F1 higher in {wins_f1}, AUPRC higher in {wins_ap}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out_rows[0]))
            w.writeheader()
            w.writerows(out_rows)


if __name__ == "__main__":
    main()
