"""moderation.distill: HarmAug distillation of a registered guard into a small student (distill.py, augment.py),
registered as kind "guard.student" (served like a guard: serving.build_guard loads either)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext
from services.common.params import parse_params
from services.moderation.guard import GuardModel
from services.moderation.jobs.data import load_examples, split_examples
from services.moderation.metrics import average_precision, f1_score
from services.moderation.params import DistillParams

_DIST_CHUNK = 64
_DIST_CKPT_EVERY = 4


def _unsafe_metrics(prefix: str, p_unsafe: np.ndarray, y: np.ndarray) -> dict[str, float]:
    if len(y) == 0:
        return {}
    out = {f"{prefix}_val_unsafe_f1": f1_score(p_unsafe >= 0.5, y > 0.5),
           f"{prefix}_val_unsafe_auprc": average_precision(p_unsafe, y > 0.5)}
    return {k: float(v) for k, v in out.items() if np.isfinite(v)}


def run_distillation(ctx: JobContext) -> dict[str, Any]:
    """params: DistillParams. Teacher = the registered guard `teacher_model_version_id`. Steps (checkpointed):
    teacher labels for train + augmented + validation texts; the plain student (train rows only) and the HarmAug
    student (train + augmented rows), an epoch a step; F1 / AUPRC (unsafe) of teacher, plain and augmented
    students on the validation split; registers the augmented student (kind "guard.student") with the metrics."""
    from services.moderation.augment import TemplateGenerator
    from services.moderation.distill import (
        StudentConfig,
        StudentTrainer,
        TrainConfig,
        Vocabulary,
        encode_data,
    )

    p = parse_params(DistillParams, ctx.params, prefix="params.")
    rows = load_examples(ctx, p.dataset_artifact_id, p.format)
    train, val = split_examples(rows, p.validation_fraction)
    if not train:
        raise InvalidArgument("params.dataset_artifact_id", "the dataset has no training rows")
    tensors, tconfig = ctx.load_model(p.teacher_model_version_id)
    teacher = GuardModel.from_registry(tensors, tconfig, version=p.teacher_model_version_id)
    gen = TemplateGenerator()
    n_gen = p.effective_n_augment
    aug = gen.generate(n_gen, seed=p.augment_seed, exclude=[r.text for r in rows]) if n_gen else []
    texts = [r.text for r in train] + [a.text for a in aug] + [r.text for r in val]
    roles = [r.role for r in train] + [a.role for a in aug] + [r.role for r in val]
    contexts = [r.prompt for r in train] + [None] * len(aug) + [r.prompt for r in val]
    n_tr, n_aug = len(train), len(aug)
    digest = hashlib.sha256(json.dumps([p.teacher_model_version_id, texts, roles, contexts]).encode()).hexdigest()

    st = ctx.load_checkpoint()
    if st is None or st.get("kind") != "distillation" or st.get("digest") != digest:
        st = {"kind": "distillation", "digest": digest, "done": 0, "unsafe": torch.zeros(0, dtype=torch.float64),
              "topics": torch.zeros(0, 11, dtype=torch.float64),
              "severity_ge": torch.zeros(0, 11, 4, dtype=torch.float64), "metrics": {}}
    parts = {k: [st[k].numpy()] for k in ("unsafe", "topics", "severity_ge")}
    done, chunks = int(st["done"]), 0
    while done < len(texts):
        ctx.check_cancelled()
        pr = teacher.predict_proba(texts[done:done + _DIST_CHUNK], roles[done:done + _DIST_CHUNK],
                                   contexts[done:done + _DIST_CHUNK])
        for k, v in parts.items():
            v.append(pr[k])
        done = min(len(texts), done + _DIST_CHUNK)
        chunks += 1
        if chunks % _DIST_CKPT_EVERY == 0 or done == len(texts):
            st = {**st, "done": done, **{k: torch.from_numpy(np.concatenate(v)) for k, v in parts.items()}}
            ctx.save_checkpoint(st)
        ctx.progress(0.4 * done / len(texts), "teacher labels")
    tl = {k: np.concatenate(v) for k, v in parts.items()}

    y_val = np.array([float(r.unsafe) for r in val])
    metrics: dict[str, float] = dict(st.get("metrics", {}))
    metrics.update(_unsafe_metrics("teacher", tl["unsafe"][n_tr + n_aug:], y_val))
    hard_tr = np.array([int(r.unsafe) for r in train])
    hard_aug = (tl["unsafe"][n_tr:n_tr + n_aug] > 0.5).astype(np.int64)
    scfg = StudentConfig(p.dim, p.hidden, p.buckets, p.min_count, p.max_vocab)
    tc = TrainConfig(epochs=p.epochs, batch_size=p.batch_size, lr=p.lr, weight_decay=p.weight_decay,
                     warmup_fraction=p.warmup_fraction, max_norm=p.max_norm, aux_weight=p.aux_weight, seed=p.seed)
    runs = ([("plain", n_tr)] if p.train_plain else []) + ([("augmented", n_tr + n_aug)] if n_aug else [])
    student = None
    for ri, (name, n_rows) in enumerate(runs):
        last = ri == len(runs) - 1
        if st.get(f"{name}_done") and not last:
            continue  # finished before a crash: its metrics are in st["metrics"], its weights are not needed
        lo, hi = 0.4 + 0.55 * ri / len(runs), 0.4 + 0.55 * (ri + 1) / len(runs)
        t_texts, t_roles = texts[:n_rows], roles[:n_rows]
        hard = np.concatenate([hard_tr, hard_aug])[:n_rows]
        vocab = Vocabulary.build(t_texts, buckets=scfg.buckets, min_count=scfg.min_count, max_size=scfg.max_vocab)
        d = encode_data(vocab, t_texts, t_roles, hard, {k: v[:n_rows] for k, v in tl.items()}, contexts[:n_rows])
        trainer = StudentTrainer(vocab, scfg, tc, n_rows)
        key = f"{name}_trainer"
        epoch = int(st.get(f"{name}_epoch", 0))
        if key in st:
            trainer.load_state(st[key])
        while epoch < p.epochs:
            ctx.check_cancelled()
            loss = trainer.train_epoch(d, epoch)
            epoch += 1
            st = {**{k: v for k, v in st.items() if not k.endswith("_trainer")}, key: trainer.state(),
                  f"{name}_epoch": epoch}
            ctx.save_checkpoint(st)
            ctx.progress(lo + (hi - lo) * epoch / p.epochs, f"{name} student epoch {epoch}", loss=loss)
        student = trainer.to_student()
        if val:
            pv = student.predict_proba([r.text for r in val], [r.role for r in val],
                                       [r.prompt for r in val])["unsafe"]
            metrics.update(_unsafe_metrics("plain" if name == "plain" else "student", pv, y_val))
        if not last:
            st = {**{k: v for k, v in st.items() if k != key}, "metrics": dict(metrics), f"{name}_done": True}
            ctx.save_checkpoint(st)
    assert student is not None
    if val:  # the student's own decision defaults, chosen on the validation split like the teacher's
        from services.moderation.decision import choose_defaults

        pv_all = student.predict_proba([r.text for r in val], [r.role for r in val], [r.prompt for r in val])
        defaults = choose_defaults(pv_all, val, target_false_block_rate=float(
            teacher.config.get("decision_defaults", {}).get("target_false_block_rate", 0.05)))
        metrics.update(student_val_default_false_block_rate=defaults["false_block_rate"],
                       student_val_default_recall=defaults["recall"])
    else:
        defaults = None
    metrics.update(n_train=float(n_tr), n_augment=float(n_aug), n_validation=float(len(val)),
                   augment_teacher_unsafe_fraction=float(hard_aug.mean()) if n_aug else 0.0)
    student.config = {"teacher_model_version_id": p.teacher_model_version_id, "augmented": bool(n_aug),
                      "augment_generator": gen.name if n_aug else None, "n_train": n_tr, "n_augment": n_aug,
                      "train": {k: v for k, v in asdict(tc).items()},
                      "loss": "0.5*(CE(hard)+KL(teacher||student)) + aux_weight*BCE(topics,severity; teacher)",
                      **({"decision_defaults": defaults} if defaults else {})}
    t, cfg = student.to_registry()
    info = ctx.register_model(p.model_name, t, kind="guard.student", config=cfg, metrics=metrics,
                              dataset_artifact_id=p.dataset_artifact_id,
                              parent_version_ids=[p.teacher_model_version_id])
    ctx.progress(1.0, "registered", **metrics)
    return {"model_version_id": info.model_version_id, "name": info.name,
            "metrics": metrics, "student_fingerprint": student.fingerprint(), "augmented": bool(n_aug)}
